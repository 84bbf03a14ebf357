import Foundation

/// Check, diff, plan, transfer and stage: brings the newest build of the install's
/// channel into `.patchsync/staging/<build>` and marks it ready. Never touches the
/// live tree (`current` and `builds/`).
public struct Syncer: Sendable {
    public let install: Install
    /// The time that metadata expiry is checked against.
    public var now: Date
    /// A bandwidth cap in bytes per second for this run, over the configured one.
    public var maxBytesPerSecond: Int?
    /// Background mode: runs only when its conditions hold (not while the game runs, on battery,
    /// in play hours or on a metered network, nor while backing off), at idle CPU and I/O
    /// priority, under a cap that yields to other traffic.
    public var discretionary = false
    /// The sync stops there (deferred, progress kept).
    public var deadline: Date?
    /// The clock, power supply and network that the conditions read.
    public var environment = SyncEnvironment.system
    /// Stops the sync from outside (signal handlers).
    public var stop: SyncStop?

    public init(install: Install, now: Date = Date()) {
        self.install = install
        self.now = now
    }

    /// Runs one sync; `onEvent` is called with progress, from any thread.
    public func run(onEvent: @escaping @Sendable (SyncEvent) -> Void = { _ in }) async throws(PatchSyncError) -> SyncReport {
        let lock = try install.lock("sync")
        defer { withExtendedLifetime(lock) {} }
        var config = try install.config()
        let state = try install.state()
        let watch = try SyncWatch(install: install, config: config, environment: environment, deadline: deadline,
                                  discretionary: discretionary, stop: stop)
        try watch.admit(state: state)
        if discretionary {
            Priority.lowerForBackground()
            config.maxBytesPerSecond = maxBytesPerSecond ?? config.discretionaryRate
            // Two connections, and short requests when yielding (HTTPClient.requestBudget): little queue
            // of the sync's own making in each request's time to first byte, latency samples often.
            config.maxConnections = min(config.connections, 2)
        } else if let maxBytesPerSecond {
            config.maxBytesPerSecond = maxBytesPerSecond
        }
        let recorder = RunningSync.Recorder(state: state)
        defer { recorder.end() }
        let settled = config
        let result = await watch.supervise(state: state) { () async throws(PatchSyncError) -> SyncReport in
            try await runAdmitted(config: settled, state: state) { event in
                recorder.note(event)
                onEvent(event)
            }
        }
        let report = try result.get()
        try SyncWatch.record(nil, in: state)  // a sync that completes resets the backoff
        return report
    }

    private func runAdmitted(config: InstallConfig, state: StateStore,
                             onEvent: @escaping @Sendable (SyncEvent) -> Void) async throws(PatchSyncError) -> SyncReport {
        try install.reconcile(state)
        let client = try HTTPClient(settings: .init(config, yielding: discretionary && (config.yieldToOtherTraffic ?? true)))
        let origin = try Origin(config, client: client)

        onEvent(.phase("checking \(config.remotes[0]) for channel \(config.channel)"))
        let trusted = try await TrustClient(directory: install.metadataDirectory, source: origin, now: now,
                                              deadline: Date() + config.refreshDeadline).refresh()
        let target = try ManifestTarget(in: trusted.targets.signed, channel: try Channel(config.channel))
        let info = target.info
        try checkSequence(info, state: state)
        var report = SyncReport(outcome: .ready, buildId: info.buildId, sequence: info.sequence)
        if info.buildId == install.currentBuild() {
            try collectGarbage(keeping: nil, state: state, config: config)
            report.outcome = .upToDate
        } else if let ready = try state.setting("ready"), Deployment.buildID(of: ready) == info.buildId {
            report.outcome = .alreadyReady
        } else if info.buildId == (try state.setting("heldBack")) {
            try collectGarbage(keeping: nil, state: state, config: config)
            report.outcome = .heldBack
        } else {
            let manifest = try await fetchManifest(target, origin: origin)
            let staging = try state.setting("staging")
            let deployment = staging.flatMap { Deployment.buildID(of: $0) == info.buildId ? $0 : nil }
                ?? Deployment.newName(for: info.buildId, in: install)
            try state.set(["seenSequence.\(config.channel)": String(info.sequence), "staging": deployment,
                           "heldBack": nil])
            try collectGarbage(keeping: deployment, state: state, config: config)
            onEvent(.phase("comparing build \(manifest.buildId) with the installed files"))
            try await stage(manifest, as: deployment, live: try liveTree(state: state), state: state, origin: origin,
                            config: config, report: &report, onEvent: onEvent)
        }
        report.bytesReceived = client.bytesReceived
        return report
    }

    /// The manifest target of the channel with the highest sequence.
    /// Refuses a build older than one already seen on the channel (rollback).
    private func checkSequence(_ info: ManifestTargetInfo, state: StateStore) throws(PatchSyncError) {
        let seen = Int(try state.setting("seenSequence.\(info.channel)") ?? "0") ?? 0
        guard info.sequence >= seen else {
            throw PatchSyncError(.refusedData, "channel \(info.channel) offers build \(info.buildId) with sequence "
                                 + "\(info.sequence), lower than \(seen) already seen (rollback)",
                                 remedy: "the origin serves an old build; nothing was changed")
        }
    }

    private func fetchManifest(_ target: ManifestTarget, origin: Origin) async throws(PatchSyncError) -> Manifest {
        let manifest: Manifest, data: Data
        if let rebuilt = await manifestFromDelta(target, origin: origin) { (manifest, data) = rebuilt } else {
            (manifest, data) = try await origin.manifest(target)
        }
        do { try FileSystem.writeAtomically(data, to: install.manifestPath(target.info.buildId)) } catch {
            throw PatchSyncError.wrap(error)
        }
        return manifest
    }

    /// Deletes the builds that apply retired to `.patchsync/trash/` and abandoned staging.
    /// Sync never touches `builds/` or `current` itself.
    func collectGarbage(keeping staged: String?, state: StateStore, config: InstallConfig) throws(PatchSyncError) {
        let ready = try state.setting("ready")
        do {
            for name in try FileSystem.list(install.stagingDirectory) where name != staged && name != ready {
                try FileSystem.removeTree(install.stagedDirectory(name))
            }
            for name in (try? FileSystem.list(install.trashDirectory)) ?? [] {
                try FileSystem.removeTree(install.trashDirectory + "/" + name)
            }
        } catch { throw PatchSyncError.wrap(error).during("removing old builds") }
        let present = (try? FileSystem.list(install.buildsDirectory)) ?? []
        try state.forgetBuilds(except: Set(present + [staged, ready].compactMap { $0 }))
    }
}
