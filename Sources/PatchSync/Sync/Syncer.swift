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

    /// Check, decide, then stage when the channel has a build this install lacks: one deployment per
    /// step of the bundle selection (the required part first, then one more optional bundle each), each
    /// marked ready as soon as it is complete, so the launcher can swap in a playable build while the
    /// optional bundles still download.
    private func runAdmitted(config: InstallConfig, state: StateStore,
                             onEvent: @escaping @Sendable (SyncEvent) -> Void) async throws(PatchSyncError) -> SyncReport {
        try install.reconcileIfFree(state)
        let client = try HTTPClient(settings: .init(config, yielding: discretionary && (config.yieldToOtherTraffic ?? true)))
        let context = SyncContext(install: install, config: config, state: state, origin: try Origin(config, client: client),
                                  onEvent: onEvent)
        let (newest, trusted) = try await check(context)
        // A preload not released yet never hides the build that is live now: that one is staged (a fresh
        // install, a player behind), and the preload is fetched beside it.
        let (chosen, pending) = try await choose(newest, trusted: trusted, origin: context.origin)
        var report: SyncReport
        if let chosen {
            report = try await stage(chosen, trusted: trusted, context: context, keepPreload: pending != nil)
        } else {
            report = SyncReport(outcome: .upToDate, buildId: newest.info.buildId, sequence: newest.info.sequence)
        }
        if let pending {
            let outcome = report.outcome
            _ = try await preload(pending, trusted: trusted, context: context, report: &report)
            if chosen != nil && outcome != .upToDate { report.outcome = outcome }
        }
        report.bytesReceived = context.origin.client.bytesReceived
        return report
    }

    /// The build to stage and the preload to fetch beside it: the newest build, unless it is a preload
    /// whose key signed metadata has not released; then the newest build before it that is not such a
    /// preload (nil when there is none) and that preload.
    private func choose(_ newest: ManifestTarget, trusted: TrustedMetadata,
                        origin: Origin) async throws(PatchSyncError) -> (ManifestTarget?, ManifestTarget?) {
        let client = TrustClient(directory: install.metadataDirectory, source: origin.preferring(0), now: now)
        func locked(_ target: ManifestTarget) async throws(PatchSyncError) -> Bool {
            guard target.info.preload != nil else { return false }
            return try await client.findTarget(Releases.keyTarget(channel: target.info.channel, build: target.info.buildId),
                                               in: trusted) == nil
        }
        guard try await locked(newest) else { return (newest, nil) }
        for target in ManifestTarget.all(in: trusted.targets.signed, channel: try Channel(newest.info.channel))
        where target.info.sequence < newest.info.sequence {
            if try await !locked(target) { return (target, newest) }
        }
        return (nil, newest)
    }

    /// Stages `target` (the channel's build to install): its manifest, then one deployment per step.
    private func stage(_ target: ManifestTarget, trusted: TrustedMetadata, context: SyncContext,
                       keepPreload: Bool) async throws(PatchSyncError) -> SyncReport {
        var context = context
        let (state, config, client, onEvent) = (context.state, context.config, context.origin.client, context.onEvent)
        var report = SyncReport(outcome: .upToDate, buildId: target.info.buildId, sequence: target.info.sequence)
        report.rollback = target.info.rollback
        guard let sha = target.file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(target.path) has no sha256")
        }
        let recorded = try state.read()
        let local = target.info.preload == nil ? localManifest(sha, recorded) : nil
        if local == nil, target.info.buildId == recorded.heldBack, recorded.currentIdentity?.manifest != sha {
            try state.update { $0.abandonStaging() }
            report.outcome = .heldBack
            return report
        }
        let manifest: Manifest, data: Data
        if target.info.preload != nil {
            // A preload: fetched ahead, sealed; staged like any build once signed metadata releases it.
            guard let unlocked = try await preload(target, trusted: trusted, context: context, report: &report) else {
                report.bytesReceived = client.bytesReceived
                return report
            }
            (manifest, data) = (unlocked.manifest, unlocked.data)
            context.sealed = unlocked.source
        } else {
            if !keepPreload, recorded.preload != nil || FileSystem.exists(install.preloadDirectory) {  // a preload no longer offered
                try state.update { $0.preload = nil }
                try? FileSystem.removeTree(install.preloadDirectory)
            }
            if let local { (manifest, data) = local } else { (manifest, data) = try await fetchManifest(target, origin: context.origin) }
        }
        let selection = config.selection(of: manifest)
        let all = BundleSelection(manifest, chosen: nil).wanted
        report.bundles = selection.wanted
        report.droppedBundles = selection.dropped
        try state.update { $0.newestManifest = sha }
        var live = try liveTrees(state: state)
        let steps = selection.steps { bundle in
            live.holdsWhole(manifest.selecting([bundle]).files)
        }
        var staged = false
        for (index, bundles) in steps.enumerated() {
            let step = try state.update(.stagingBegun) { (s) throws(PatchSyncError) -> SyncStep in
                try SyncStep.decide(&s, target: target, bundles: bundles, all: all, later: Array(steps[(index + 1)...]),
                                    inUse: install.deploymentFolderExists)
            }
            switch step {
            case .heldBack:
                report.outcome = .heldBack
                return report
            case .upToDate, .alreadyReady:
                if !staged { report.outcome = step.outcome }
            case .stage(let identity):
                do { try FileSystem.writeAtomically(data, to: install.manifestPath(identity.name)) } catch {
                    throw PatchSyncError.wrap(error)
                }
                try Housekeeping(install: install, state: state, stagingHeld: true)
                    .runIfFree(keepPacks: Set((manifest.deltas ?? []).map(\.object.hex)))
                onEvent(.phase("comparing build \(manifest.buildId) (\(bundles.joined(separator: ", "))) with the installed files"))
                let deployment = StagedBuild(identity, in: install, state: state)
                var stepReport = SyncReport(outcome: .ready, buildId: report.buildId, sequence: report.sequence)
                try await stage(manifest.selecting(bundles), into: deployment, live: live, context: context, report: &stepReport)
                report.add(stepReport)
                staged = true
                report.outcome = .ready
                live = try liveTrees(state: state)
            }
            onEvent(.bundles(try install.bundleProgress(state: state.read(), selection: selection, sha: sha, manifest: manifest)))
        }
        // Once staged, the delta packs it used go too, and what a preload fetched but its manifest.
        try Housekeeping(install: install, state: state, stagingHeld: true).runIfFree()
        if let source = context.sealed { source.store.prune(keeping: source.keep) }
        report.bytesReceived = client.bytesReceived
        return report
    }

    /// The target's manifest as a deployment of this install keeps it, when one holds that manifest
    /// (its bytes checked against the signed hash): no download to learn what is already here.
    private func localManifest(_ sha: String, _ state: InstallState) -> (Manifest, Data)? {
        for identity in [state.currentIdentity, state.ready, state.staging].compactMap({ $0 }) where identity.manifest == sha {
            let path = install.manifestPath(identity.name)
            guard let data = try? FileSystem.read(path, limit: 256 << 20), SHA256Hasher.hash(data).hex == sha,
                  let manifest = try? Manifest.decode(data, what: path) else { continue }
            return (manifest, data)
        }
        return nil
    }

    /// The TUF workflow, then the channel's newest manifest target; refuses a build older than one
    /// already seen on the channel (rollback).
    private func check(_ context: SyncContext) async throws(PatchSyncError) -> (ManifestTarget, TrustedMetadata) {
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
        return (target, trusted)
    }

    /// Downloads (or rebuilds by delta) the manifest of `target`.
    private func fetchManifest(_ target: ManifestTarget, origin: Origin) async throws(PatchSyncError) -> (Manifest, Data) {
        if let rebuilt = await manifestFromDelta(target, origin: origin) { return rebuilt }
        return try await origin.manifest(target)
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
    /// Set when staging an unlocked preload build: where its sealed objects come from.
    var sealed: SealedSource? = nil
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

    /// Up to date when the current deployment holds the target's manifest with `bundles`; already ready
    /// when the ready one does; held back when it is the build rolled back from. Otherwise staging resumes
    /// the recorded deployment when it holds the same manifest and bundles, or begins a new one under a
    /// new name. Staging of another step (`later`) of the same build is kept for when its turn comes.
    static func decide(_ state: inout InstallState, target: ManifestTarget, bundles: [String], all: [String],
                       later: [[String]], inUse: (String) -> Bool) throws(PatchSyncError) -> SyncStep {
        guard let sha = target.file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(target.path) has no sha256")
        }
        let info = target.info
        let settled: SyncStep? = if let current = state.current, state.currentIdentity?.holds(sha, bundles, all: all)
            ?? (bundles == all && Deployment.buildID(of: current) == info.buildId) {
            .upToDate
        } else if state.ready?.holds(sha, bundles, all: all) == true {
            .alreadyReady
        } else if info.buildId == state.heldBack && state.currentIdentity?.manifest != sha {
            .heldBack
        } else {
            nil
        }
        if let settled {
            // A ready deployment of this build with another choice of bundles is not what the player wants now.
            if case .upToDate = settled, later.isEmpty, let ready = state.ready, ready.manifest == sha, !ready.holds(sha, bundles, all: all) {
                state.ready = nil
            }
            // Whatever was being staged is not wanted any more, unless a later step of this build stages it.
            if !later.contains(where: { state.staging?.holds(sha, $0, all: all) == true }) { state.abandonStaging() }
            return settled
        }
        var identity = DeploymentIdentity(name: "", buildId: info.buildId, channel: info.channel, manifest: sha)
        identity.rollback = info.rollback
        identity.bundles = bundles
        if let staging = state.staging, staging.holds(sha, bundles, all: all), staging.channel == info.channel {
            identity.name = staging.name
        } else {
            identity.name = state.newDeploymentName(for: info.buildId, inUse: inUse)
        }
        state.beginStaging(identity, sequence: info.sequence)
        return .stage(identity)
    }
}
