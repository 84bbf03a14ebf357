import Foundation

extension Syncer {
    /// Stages a repaired copy of the live build as a new deployment: good files hard-linked,
    /// damaged ones rebuilt from chunks that still verify locally, the rest fetched. Returns
    /// the deployment, marked ready for the next apply.
    public func repair(
        _ report: VerifyReport,
        onEvent: @escaping @Sendable (SyncEvent) -> Void = { _ in }
    ) async throws(PatchSyncError) -> String {
        let lock = try install.lock(.staging, for: "repair")
        defer { withExtendedLifetime(lock) {} }
        let config = try install.config()
        let state = try install.state()
        let manifest = try install.manifest(of: report.deployment)
        let manifestData = try FileSystem.read(install.manifestPath(report.deployment), limit: 256 << 20)
        // The repair holds the live build's content under a name of its own.
        let identity = try state.update(.stagingBegun) { (s) throws(PatchSyncError) -> DeploymentIdentity in
            let known = s.deployed[report.deployment]
            var identity = DeploymentIdentity(
                name: s.newDeploymentName(for: report.buildId, inUse: install.deploymentFolderExists),
                buildId: report.buildId, channel: known?.channel ?? manifest.channel.name,
                manifest: known?.manifest ?? SHA256Hasher.hash(manifestData).hex)
            identity.bundles = known?.bundles
            identity.summary = known?.summary
            s.beginRepair(identity)
            return identity
        }
        do { try FileSystem.writeAtomically(manifestData, to: install.manifestPath(identity.name)) } catch {
            throw PatchSyncError.wrap(error)
        }
        let live = LiveTree(
            manifest: manifest, directory: install.buildDirectory(report.deployment),
            excluding: Set(report.damaged.map(\.path)))
        let client = try HTTPClient(settings: .init(config))
        var context = SyncContext(
            install: install, config: config, state: state, origin: try Origin(config, client: client), meter: nil,
            onEvent: onEvent)
        if let objects = manifest.sealed, !objects.isEmpty {  // a build that was a preload
            let trusted = try await context.origin.refreshTrust(
                directory: install.metadataDirectory, now: now,
                deadline: context.origin.refreshDeadline(seconds: config.refreshDeadline, giveUp: giveUpAfter))
            context.sealed = try await context.preloader(now: now).sealedSource(for: manifest, trusted: trusted)
        }
        var sync = SyncReport(outcome: .ready, buildId: report.buildId, sequence: manifest.sequence)
        try await stage(
            manifest, into: StagedBuild(identity, in: install, state: state), live: live, context: context,
            report: &sync)
        if let source = context.sealed { source.store.prune(keeping: source.keep) }
        return identity.name
    }
}
