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
        let lock = try install.lock(.staging, for: "sync")
        defer { withExtendedLifetime(lock) {} }
        let config = settled(try install.config())
        let state = try install.state()
        let watch = try SyncWatch(install: install, config: config, environment: environment, deadline: deadline,
                                  discretionary: discretionary, stop: stop)
        try watch.admit(state: state)
        if discretionary { Priority.lowerForBackground() }
        let recorder = RunningSync.Recorder(state: state)
        defer { recorder.end() }
        let result = await watch.supervise(state: state) { () async throws(PatchSyncError) -> SyncReport in
            try await runAdmitted(config: config, state: state) { event in
                recorder.note(event)
                onEvent(event)
            }
        }
        let report = try result.get()
        try SyncWatch.record(nil, in: state)  // a sync that completes resets the backoff
        return report
    }

    /// The configuration with this run's caps: a discretionary run goes gently, on two connections
    /// (short requests when yielding: little queue of its own making in each request's time to first
    /// byte, latency samples often).
    private func settled(_ config: InstallConfig) -> InstallConfig {
        var config = config
        if discretionary {
            config.maxBytesPerSecond = maxBytesPerSecond ?? config.discretionaryRate
            config.maxConnections = min(config.connections, 2)
        } else if let maxBytesPerSecond {
            config.maxBytesPerSecond = maxBytesPerSecond
        }
        return config
    }

    /// Check, decide, then stage when the channel has a build this install lacks.
    private func runAdmitted(config: InstallConfig, state: StateStore,
                             onEvent: @escaping @Sendable (SyncEvent) -> Void) async throws(PatchSyncError) -> SyncReport {
        try install.reconcileIfFree(state)
        let client = try HTTPClient(settings: .init(config, yielding: discretionary && (config.yieldToOtherTraffic ?? true)))
        let context = SyncContext(install: install, config: config, state: state, origin: try Origin(config, client: client),
                                  onEvent: onEvent)
        let target = try await check(context)
        let step = try state.update(.stagingBegun) { (s) throws(PatchSyncError) -> SyncStep in
            try SyncStep.decide(&s, target: target, inUse: install.deploymentFolderExists)
        }
        var report = SyncReport(outcome: step.outcome, buildId: target.info.buildId, sequence: target.info.sequence)
        report.rollback = target.info.rollback
        if case .stage(let identity) = step {
            let manifest = try await fetchManifest(target, as: identity.name, origin: context.origin)
            try Housekeeping(install: install, state: state, stagingHeld: true).runIfFree(keepPacks: Set((manifest.deltas ?? []).map(\.object.hex)))
            onEvent(.phase("comparing build \(manifest.buildId) with the installed files"))
            let staged = StagedBuild(identity, in: install, state: state)
            try await stage(manifest, into: staged, live: try liveTree(state: state), context: context, report: &report)
        }
        // Once staged, the delta packs it used go too.
        try Housekeeping(install: install, state: state, stagingHeld: true).runIfFree()
        report.bytesReceived = client.bytesReceived
        return report
    }

    /// The TUF workflow, then the channel's newest manifest target; refuses a build older than one
    /// already seen on the channel (rollback).
    private func check(_ context: SyncContext) async throws(PatchSyncError) -> ManifestTarget {
        let config = context.config
        context.onEvent(.phase("checking \(config.remotes[0]) for channel \(config.channel)"))
        let trusted = try await context.origin.refreshTrust(directory: install.metadataDirectory, now: now,
                                                            deadline: Date() + config.refreshDeadline)
        let target = try ManifestTarget(in: trusted.targets.signed, channel: try Channel(config.channel))
        let seen = try context.state.read().seenSequence[target.info.channel] ?? 0
        guard target.info.sequence >= seen else {
            throw PatchSyncError(.refusedData, "channel \(target.info.channel) offers build \(target.info.buildId) with sequence "
                                 + "\(target.info.sequence), lower than \(seen) already seen (rollback)",
                                 remedy: "the origin serves an old build; nothing was changed")
        }
        return target
    }

    /// Downloads (or rebuilds by delta) the manifest of `target` and keeps it for the deployment.
    private func fetchManifest(_ target: ManifestTarget, as deployment: String,
                               origin: Origin) async throws(PatchSyncError) -> Manifest {
        let manifest: Manifest, data: Data
        if let rebuilt = await manifestFromDelta(target, origin: origin) { (manifest, data) = rebuilt } else {
            (manifest, data) = try await origin.manifest(target)
        }
        do { try FileSystem.writeAtomically(data, to: install.manifestPath(deployment)) } catch {
            throw PatchSyncError.wrap(error)
        }
        return manifest
    }
}

/// What one sync works with: the install, its settings for this run, its state, the origin, and
/// where progress goes.
struct SyncContext: Sendable {
    let install: Install
    let config: InstallConfig
    let state: StateStore
    let origin: Origin
    let onEvent: @Sendable (SyncEvent) -> Void
}

/// What a sync does about the channel's newest build, decided on the install state in one transaction.
enum SyncStep: Sendable {
    case upToDate, alreadyReady, heldBack
    case stage(DeploymentIdentity)

    var outcome: SyncReport.Outcome {
        switch self {
        case .upToDate: return .upToDate
        case .alreadyReady: return .alreadyReady
        case .heldBack: return .heldBack
        case .stage: return .ready
        }
    }

    /// Up to date when the current deployment holds the target's manifest; already ready when the
    /// ready one does; held back when it is the build rolled back from. Otherwise staging resumes the
    /// recorded deployment when it holds the same manifest, or begins a new one under a new name.
    static func decide(_ state: inout InstallState, target: ManifestTarget,
                       inUse: (String) -> Bool) throws(PatchSyncError) -> SyncStep {
        guard let sha = target.file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(target.path) has no sha256")
        }
        let info = target.info
        let settled: SyncStep? = if let current = state.current, state.currentIdentity?.manifest == sha
            || (state.currentIdentity == nil && Deployment.buildID(of: current) == info.buildId) {
            .upToDate
        } else if state.ready?.manifest == sha {
            .alreadyReady
        } else if info.buildId == state.heldBack {
            .heldBack
        } else {
            nil
        }
        if let settled {
            state.abandonStaging()  // whatever was being staged is not the channel's build any more
            return settled
        }
        var identity = DeploymentIdentity(name: "", buildId: info.buildId, channel: info.channel, manifest: sha)
        identity.rollback = info.rollback
        if let staging = state.staging, staging.manifest == sha, staging.channel == info.channel {
            identity.name = staging.name
        } else {
            identity.name = state.newDeploymentName(for: info.buildId, inUse: inUse)
        }
        state.beginStaging(identity, sequence: info.sequence)
        return .stage(identity)
    }
}
