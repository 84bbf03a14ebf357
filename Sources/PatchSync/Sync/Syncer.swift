import Foundation
import Synchronization

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
    /// After this long with requests in flight and no byte arriving, a `.stalled` event says so (the
    /// origin froze, or the network went away); the sync goes on, retrying.
    public var stallAfter: Duration = NetworkQuiet.stallAfter
    /// After this long with requests in flight and no byte arriving, counted from the last byte (an
    /// origin that refuses connections is waited for), the sync stops with exit 69 (the chunks already
    /// verified are kept). nil: never; it waits until bytes come or it is stopped.
    public var giveUpAfter: Duration? = MirrorGroup.defaultGiveUp
    /// A foreground sync that finds a discretionary one running asks it to stop and goes on at full speed.
    public var takeOver = true
    /// The optional bundles to install, saved in the install's configuration first (nil: as configured).
    public var bundles: [String]?
    /// LAN shares to ask for chunks before the origin (`sync --peer`), over those the configuration names.
    public var peers: [String] = []
    /// Steers the run from outside (its cap); a configuration saved while it runs applies too.
    public var control: SyncControl?

    public init(install: Install, now: Date = Date()) {
        self.install = install
        self.now = now
    }

    /// Runs one sync; `onEvent` is called with progress, from any thread.
    public func run(onEvent: @escaping @Sendable (SyncEvent) -> Void = { _ in }) async throws(PatchSyncError)
        -> SyncReport
    {
        let lock = try await stagingLock()
        defer { withExtendedLifetime(lock) {} }
        // Staging writes the build's paths as they are: where names fold case, two could become one.
        try CaseFolding.refuse(install: install.root, checking: install.stagingDirectory)
        // Saved once this run holds the staging: a run refused beside another changes nothing.
        if let bundles {
            try install.updateConfig { config in
                config.bundles = bundles
                config.excludedBundles = nil
            }
        }
        let config = settled(try install.config())
        let state = try install.state()
        let watch = try SyncWatch(
            install: install, config: config, environment: environment, deadline: deadline,
            discretionary: discretionary, stop: stop)
        try watch.admit(state: state)
        if discretionary { Priority.lowerForBackground() }
        // The log first: a follower that sees the running record opens this run's file, not the last one's.
        let log = SyncEventLog.Writer(install.layout.eventLogFile)
        let recorder = RunningSync.Recorder(state: state, discretionary: discretionary)
        let control = self.control ?? SyncControl()
        let watcher = watchConfig(control)
        defer { watcher.cancel() }
        defer { recorder.end() }
        let totals = UpdateTotals(store: state)
        // One event at a time, in order, from any thread: a step's count an event shows never goes back
        // (the watch's tick sends what arriving bytes made due, the fetch what was verified).
        let order = Mutex(TransferOrder())
        let emit: @Sendable (SyncEvent) -> Void = { event in
            order.withLock { order in
                var event = event
                if case .transfer(let status) = event {
                    guard let status = order.admit(status) else { return }
                    event = .transfer(totals.decorate(status))
                }
                recorder.note(event)
                log.write(event)
                onEvent(event)
            }
        }
        let meter = SyncMeter(onEvent: emit)
        let result = await watch.supervise(state: state, meter: meter, stallAfter: stallAfter, giveUpAfter: giveUpAfter)
        {
            () async throws(PatchSyncError) -> SyncReport in
            try await runAdmitted(
                config: config, state: state, meter: meter, totals: totals, control: control, onEvent: emit)
        }
        log.end(result)
        let report = try result.get()
        try SyncWatch.record(nil, in: state)  // a sync that completes resets the backoff
        return report
    }

    /// The staging lock; a foreground sync that finds a discretionary one holding it asks that one to
    /// stop (``InstallLayout/takeOverFile``) and waits until its progress is recorded and the lock free.
    /// A holder that is no sync (an apply's or launch's housekeeping after its swap, a repair) is waited
    /// for up to ``holderWait`` before the sync defers.
    private func stagingLock() async throws(PatchSyncError) -> InstallLock {
        do { return try install.lock(.staging, for: "sync") } catch {
            guard error.reason == .otherSync else { throw error }
            // The holder writes its record just after it takes the lock: a moment to see it.
            var running = RunningSync.alive(try? install.state(readOnly: true).read().running)
            for _ in 0..<10 where running == nil {
                try? await Task.sleep(for: .milliseconds(100))
                running = RunningSync.alive(try? install.state(readOnly: true).read().running)
            }
            if running == nil, let lock = try await waitForLock(Self.holderWait) { return lock }
            guard !discretionary, takeOver, running?.discretionary == true else {
                var refused = error
                refused.remedy = "`patchsync sync --attach` follows its progress (Install.attach() in Swift)"
                throw refused
            }
            // The request is a file this process holds an flock on: it dies with the process (no stale request).
            let request = install.layout.takeOverFile
            guard let held = try? FileLock.tryExclusive(request) else {
                throw error  // another foreground sync is taking over already
            }
            defer {
                unlink(request)
                withExtendedLifetime(held) {}
            }
            if let lock = try await waitForLock(Self.takeOverWait) { return lock }
            throw error
        }
    }

    /// The staging lock once it is free within `wait` (polled), or nil; a stop request ends the wait as
    /// the sync's own stop.
    private func waitForLock(_ wait: Duration) async throws(PatchSyncError) -> InstallLock? {
        let until = ContinuousClock.now + wait
        while ContinuousClock.now < until {
            if let stop, let (_, message) = stop.reason {
                throw PatchSyncError(.deferred, "sync stopped: \(message)", reason: .stopped)
            }
            do { try await Task.sleep(for: .milliseconds(100)) } catch { throw PatchSyncError.cancelled }
            if let lock = try? install.lock(.staging, for: "sync") { return lock }
        }
        return nil
    }

    /// How long a foreground sync waits for a discretionary one to hand over.
    static let takeOverWait = Duration.seconds(60)
    /// How long a sync waits for a holder of the staging lock that is no sync (housekeeping, a repair).
    static let holderWait = Duration.seconds(10)

    /// Applies the cap of a configuration saved while the run goes on (`patchsync config set
    /// maxBytesPerSecond 2M`), unless this run has a cap of its own.
    private func watchConfig(_ control: SyncControl) -> Task<Void, Never> {
        let (install, discretionary, fixed) = (install, discretionary, maxBytesPerSecond)
        return Task.detached {
            var seen = try? FileSystem.status(install.configPath)?.st_mtim
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                let now = try? FileSystem.status(install.configPath)?.st_mtim
                guard now?.tv_sec != seen?.tv_sec || now?.tv_nsec != seen?.tv_nsec else { continue }
                seen = now
                guard fixed == nil, let config = try? install.config() else { continue }
                control.configured(discretionary ? config.discretionaryRate : config.maxBytesPerSecond)
            }
        }
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
    private func runAdmitted(
        config: InstallConfig, state: StateStore, meter: SyncMeter, totals: UpdateTotals, control: SyncControl,
        onEvent: @escaping @Sendable (SyncEvent) -> Void
    ) async throws(PatchSyncError) -> SyncReport {
        try install.reconcileIfFree(state)
        try install.dropTamperedReady(state)
        var settings = HTTPClient.Settings(config, yielding: discretionary && (config.yieldToOtherTraffic ?? true))
        settings.adjustableRate = true
        let client = try HTTPClient(settings: settings, meter: meter)
        control.attach(client)
        var context = SyncContext(
            install: install, config: config, state: state, origin: try Origin(config, client: client), meter: meter,
            onEvent: onEvent, totals: totals)
        let (newest, trusted) = try await check(context)
        // A preload not released yet never hides the build that is live now: that one is staged (a fresh
        // install, a player behind), and the preload is fetched beside it.
        let channel = try await channelBuilds(trusted, channel: config.channel, origin: context.origin)
        let decided = try LiveDecision.choose(channel.map(\.build), state: try state.read())
        let target = { (build: ChannelBuild?) in channel.first { $0.build == build }?.target }
        let (chosen, pending) = (target(decided.stage), target(decided.preload))
        // When the build staged is a preload too (the older one, released), the preload store serves two
        // builds: the prunes of each one's steps keep what the other needs.
        let twoPreloads = chosen?.info.preload != nil && pending != nil
        // Peers only when there is content to fetch: an up-to-date sync asks no one (nor DNS-SD).
        if chosen != nil || pending != nil, let peers = makePeers(config, client: client) {
            context.peers = peers
            context.onEvent = { event in
                guard case .transfer(var status) = event else { return onEvent(event) }
                status.peerBytes = peers.bytes
                onEvent(.transfer(status))
            }
            meter.send(through: context.onEvent)
        }
        var report: SyncReport
        if let chosen {
            if twoPreloads, let pending {
                context.preloadKeep = await context.preloader(now: now).preloadFiles(of: pending)
            }
            report = try await stage(chosen, trusted: trusted, context: context, keepPreload: pending != nil)
        } else {
            report = SyncReport(outcome: .upToDate, buildId: newest.info.buildId, sequence: newest.info.sequence)
        }
        if let pending {
            if twoPreloads, let chosen {
                context.preloadKeep = await context.preloader(now: now).preloadFiles(of: chosen)
            }
            let outcome = report.outcome
            report.record(try await context.preloader(now: now).preload(pending, trusted: trusted))
            if chosen != nil && outcome != .upToDate { report.outcome = outcome }
        }
        report.bytesReceived = context.origin.client.bytesReceived
        report.peers = context.peers?.standings
        report.bytesFromLocal = max(
            0, report.buildBytes - report.bytesFromOrigin - report.bytesFromPeers - report.bytesFromPreload)
        if meter.wasted > 0 { report.bytesWasted = meter.wasted }
        return report
    }

    /// The peers of this run: `--peer`, the configuration's, and the shares of this repository that
    /// DNS-SD finds (unless the configuration turns discovery off); nil when there are none. They are
    /// asked through `client`, the origin's: one cap and one meter for every byte of the sync.
    private func makePeers(_ config: InstallConfig, client: HTTPClient) -> Peers? {
        guard let repository = try? ShareIdentity.of(install) else { return nil }
        var urls = peers + (config.peers ?? [])
        // Discovered shares only fill the places that named peers leave: a network may announce any
        // number, and only the first PeerPolicy.maxProbed are probed (the few that answer soonest are used).
        if config.discoverPeers ?? true, urls.count < PeerPolicy.maxProbed {
            // Not this machine's own share (`sync --share`): it lacks what this sync needs.
            let own = Set(ShareServer.privateAddresses())
            urls += PeerDiscovery.browse(repository: repository, timeout: 2).filter { url in
                !own.contains { url.contains("//\($0):") || url.contains("//[\($0)]:") }
            }
        }
        guard !urls.isEmpty else { return nil }
        return Peers(urls: urls, repository: repository, client: client)
    }

    /// The channel's builds as the decision reads them, each preload with whether signed metadata has
    /// released its key, and the targets they come from.
    private func channelBuilds(_ trusted: TrustedMetadata, channel: String, origin: Origin) async throws(PatchSyncError)
        -> [(build: ChannelBuild, target: ManifestTarget)]
    {
        let client = TrustClient(directory: install.metadataDirectory, source: origin.preferring(0), now: now)
        var builds: [(ChannelBuild, ManifestTarget)] = []
        for target in ManifestTarget.all(in: trusted.targets.signed, channel: try Channel(channel)) {
            let released =
                target.info.preload == nil
                ? false
                : try await client.findTarget(
                    OriginLayout.keyTarget(channel: target.info.channel, build: target.info.buildId), in: trusted)
                    != nil
            builds.append((try ChannelBuild(target, released: released), target))
        }
        return builds
    }

    /// Stages `target` (the channel's build to install): gather what the install holds, decide (the
    /// fast path when it is up to date, held back), fetch or unlock its manifest, then perform one
    /// deployment per step. Housekeeping runs once at the end of the run.
    private func stage(
        _ target: ManifestTarget, trusted: TrustedMetadata, context: SyncContext,
        keepPreload: Bool
    ) async throws(PatchSyncError) -> SyncReport {
        var context = context
        let state = context.state
        var report = SyncReport(outcome: .upToDate, buildId: target.info.buildId, sequence: target.info.sequence)
        report.rollback = target.info.rollback
        guard let sha = target.file.hashes["sha256"] else {
            throw PatchSyncError(.refusedData, "target \(target.path) has no sha256")
        }
        // Gather.
        let recorded = try state.read()
        let build = try ChannelBuild(target, released: target.info.preload != nil)
        // Decide.
        if let upToDate = try upToDate(build, sha: sha, recorded: recorded, context: context, keepPreload: keepPreload)
        {
            report.bundles = upToDate.wanted
            report.droppedBundles = upToDate.dropped
            return report
        }
        let local = target.info.preload == nil ? localManifest(sha, recorded) : nil
        if local == nil, LiveDecision.isHeldBack(build, state: recorded) {
            try state.update { $0.abandonStaging() }
            report.outcome = .heldBack
            return report
        }
        // Perform: the manifest, then the steps.
        let manifest: Manifest, data: Data
        if target.info.preload != nil {
            // A preload: fetched ahead, sealed; staged like any build once signed metadata releases it.
            let preloaded = try await context.preloader(now: now).preload(target, trusted: trusted)
            report.record(preloaded)
            guard let unlocked = preloaded.unlocked else {
                report.bytesReceived = context.origin.client.bytesReceived
                return report
            }
            (manifest, data) = (unlocked.manifest, unlocked.data)
            context.sealed = unlocked.source
        } else {
            try dropPreloadNoLongerOffered(recorded, keepPreload: keepPreload, state: state)
            if let local {
                (manifest, data) = local
            } else {
                (manifest, data) = try await fetchManifest(target, origin: context.origin)
            }
        }
        // Held back between steps (a rollback meanwhile): the run ends there, as the decision said.
        guard try await stageSteps(manifest, data: data, sha: sha, build: build, context: context, report: &report)
        else { return report }
        // Once staged, the delta packs it used go too, and what a preload fetched but its manifest.
        try Housekeeping(install: install, state: state, stagingHeld: true).runIfFree()
        if let source = context.sealed { source.store.prune(keeping: source.keep) }
        report.bytesReceived = context.origin.client.bytesReceived
        return report
    }

    /// The fast path: when the signed target names the live manifest and its record says which bundles
    /// the build has, nothing is staged and no manifest is read, whatever the number of files. Returns
    /// the bundles chosen then; nil when there is something to stage.
    private func upToDate(
        _ build: ChannelBuild, sha: String, recorded: InstallState, context: SyncContext, keepPreload: Bool
    ) throws(PatchSyncError) -> BundleSelection? {
        let (state, config) = (context.state, context.config)
        guard
            let (summary, selection) = LiveDecision.upToDate(
                build, state: recorded, chosen: config.bundles, excluded: config.excludedBundles ?? []),
            let current = recorded.current, install.currentDeployment() == current,
            FileSystem.exists(install.buildDirectory(current))
        else { return nil }
        try dropPreloadNoLongerOffered(recorded, keepPreload: keepPreload, state: state)
        if recorded.newestManifest != sha || recorded.update != nil {
            try state.update { s in
                s.recordNewest(sha)
                s.recordUpdate(nil)
            }
        }
        try Housekeeping(install: install, state: state, stagingHeld: true).runIfFree()
        let progress = try install.bundleProgress(state: state.read(), selection: selection, sha: sha, summary: summary)
        {
            nil
        }
        context.onEvent(.bundles(progress))
        return selection
    }

    /// Stages `manifest` one step of bundles at a time, each as its own deployment that the state
    /// decides on (``LiveDecision/step``): the required bundles first, so the build is playable soonest.
    /// False when a step was held back: nothing more is done in this run.
    private func stageSteps(
        _ manifest: Manifest, data: Data, sha: String, build: ChannelBuild, context: SyncContext,
        report: inout SyncReport
    ) async throws(PatchSyncError) -> Bool {
        let (state, config, onEvent) = (context.state, context.config, context.onEvent)
        let selection = config.selection(of: manifest)
        let all = BundleSelection(manifest, chosen: nil).wanted
        report.bundles = selection.wanted
        report.droppedBundles = selection.dropped
        try state.update { $0.recordNewest(sha) }
        // Every live file is checked up front only when an optional bundle may be here whole already;
        // otherwise the step checks what it needs (``stage(_:into:live:context:report:step:recycling:)``).
        var live: LiveTree? = selection.optional.isEmpty ? nil : try install.liveTrees(state: state)
        let steps = selection.steps { bundle in
            live?.holdsWhole(manifest.selecting([bundle]).files) ?? false
        }
        try context.totals?.start(manifest, sha: sha, wanted: selection.wanted, steps: steps)
        defer { context.totals?.finish() }
        var staged = false
        let summary = BuildSummary(manifest)
        for (index, bundles) in steps.enumerated() {
            let step = try state.update(.stagingBegun) { (s) throws(PatchSyncError) -> SyncStep in
                LiveDecision.step(
                    &s, build: build, bundles: bundles, all: all, later: Array(steps[(index + 1)...]),
                    summary: summary, inUse: install.deploymentFolderExists)
            }
            switch step {
            case .heldBack:
                report.outcome = .heldBack
                return false
            case .upToDate, .alreadyReady:
                if !staged { report.outcome = step.outcome }
            case .stage(let identity):
                try await stageStep(
                    manifest, data: data, sha: sha, bundles: bundles, identity: identity, live: live,
                    context: context, report: &report)
                staged = true
                report.outcome = .ready
                // What the next step may link: this one's tree too (checking every file of the build again
                // costs as much as the first look, so not after the last step).
                if index < steps.count - 1 { live = try install.liveTrees(state: state) }
            }
            onEvent(
                .bundles(
                    try install.bundleProgress(state: state.read(), selection: selection, sha: sha, summary: summary) {
                        manifest
                    }))
        }
        try state.update { s in
            s.recordUpdate(nil)  // the update is in: its totals are no longer needed
            // records from before summaries: the next up-to-date sync reads no manifest
            s.recordSummary(summary, for: sha)
        }
        return true
    }

    /// One step: the manifest kept beside the deployment (and its decoded cache), then the bundles staged.
    private func stageStep(
        _ manifest: Manifest, data: Data, sha: String, bundles: [String], identity: DeploymentIdentity,
        live: LiveTree?, context: SyncContext, report: inout SyncReport
    ) async throws(PatchSyncError) {
        do { try FileSystem.writeAtomically(data, to: install.manifestPath(identity.name)) } catch {
            throw PatchSyncError.wrap(error)
        }
        // Decoded once: the next patch, verify or repair loads it without a JSON parser.
        try? ManifestCache.write(manifest, sha: sha, to: install.layout.manifestCache(identity.name))
        try Housekeeping(install: install, state: context.state, stagingHeld: true)
            .runIfFree(keepPacks: Set((manifest.deltas ?? []).map(\.object.hex)))
        context.onEvent(
            .phase(
                .comparing,
                "comparing build \(manifest.buildId) (\(bundles.joined(separator: ", "))) with the installed files"))
        let deployment = StagedBuild(identity, in: install, state: context.state)
        var stepReport = SyncReport(outcome: .ready, buildId: report.buildId, sequence: report.sequence)
        try await stage(
            manifest.selecting(bundles), into: deployment, live: live, context: context, report: &stepReport,
            step: bundles, recycling: true)
        report.add(stepReport)
    }

    /// A preload the channel no longer offers goes: its record and its store.
    private func dropPreloadNoLongerOffered(_ recorded: InstallState, keepPreload: Bool, state: StateStore)
        throws(PatchSyncError)
    {
        guard !keepPreload, recorded.preload != nil || FileSystem.exists(install.preloadDirectory) else { return }
        try state.update { $0.recordPreload(nil) }
        try? Housekeeping(install: install, state: state, stagingHeld: true).removePreloadStore()
    }

    /// The target's manifest as a deployment of this install keeps it, when one holds that manifest
    /// (its bytes checked against the signed hash): no download to learn what is already here.
    private func localManifest(_ sha: String, _ state: InstallState) -> (Manifest, Data)? {
        for identity in [state.currentIdentity, state.ready, state.staging].compactMap({ $0 })
        where identity.manifest == sha {
            let path = install.manifestPath(identity.name)
            guard let data = try? FileSystem.read(path, limit: 256 << 20), SHA256Hasher.hash(data).hex == sha,
                let manifest = ManifestCache.read(install.layout.manifestCache(identity.name), sha: sha)
                    ?? (try? Manifest.decode(data, what: path))
            else { continue }
            return (manifest, data)
        }
        return nil
    }

    /// The TUF workflow, then the channel's newest manifest target (``LiveDecision/choose(_:state:)``
    /// refuses one older than a build the channel already showed).
    private func check(_ context: SyncContext) async throws(PatchSyncError) -> (ManifestTarget, TrustedMetadata) {
        let config = context.config
        context.onEvent(.phase(.checking, "checking \(config.remotes[0]) for channel \(config.channel)"))
        let trusted = try await context.origin.refreshTrust(
            directory: install.metadataDirectory, now: now,
            deadline: context.origin.refreshDeadline(seconds: config.refreshDeadline, giveUp: giveUpAfter))
        return (try ManifestTarget(in: trusted.targets.signed, channel: try Channel(config.channel)), trusted)
    }

    /// Downloads (or rebuilds by delta) the manifest of `target`.
    private func fetchManifest(_ target: ManifestTarget, origin: Origin) async throws(PatchSyncError) -> (
        Manifest, Data
    ) {
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
    /// The sync's meter, which the origin's client counts every transfer on (nil: a repair's plain client).
    var meter: SyncMeter?
    var onEvent: @Sendable (SyncEvent) -> Void
    /// Puts each step's transfer on the whole update's scale.
    var totals: UpdateTotals? = nil
    /// Set when staging an unlocked preload build: where its sealed objects come from.
    var sealed: SealedSource? = nil
    /// LAN shares asked before the origin (nil: none named or found).
    var peers: Peers? = nil
    /// Files of the preload store that another preload of this sync needs (the newer one, pending, while
    /// the older one is released and staged; then the older one's plan and manifest): every prune of the
    /// store keeps them.
    var preloadKeep: Set<String> = []

    /// The preloader of this sync's install; its prunes keep ``preloadKeep``.
    func preloader(now: Date) -> Preloader {
        let meter = self.meter, onEvent = self.onEvent
        return Preloader(
            install: install, state: state, origin: origin, config: config, now: now, keep: preloadKeep,
            onEvent: onEvent,
            post: { event in
                if let meter { meter.post(event) } else { onEvent(event) }
            })
    }
}

extension SyncReport {
    /// What a preload step did: where the preload stands, and `.preloaded` while it is locked.
    mutating func record(_ preloaded: Preloader.Outcome) {
        if let status = preloaded.status { preload = status }
        if preloaded.unlocked == nil { outcome = .preloaded }
    }
}
