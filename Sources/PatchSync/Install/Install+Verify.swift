import Foundation

/// What `verify` found in the live tree.
public struct VerifyReport: Codable, Sendable {
    /// How a file differs from its manifest.
    public enum Problem: String, Codable, Sendable {
        case missing, wrongSize, wrongHash, wrongMode
        /// A symbolic link that points elsewhere than the manifest says.
        case wrongLink
    }

    /// One damaged file.
    public struct Damage: Codable, Sendable, Hashable {
        public var path: String
        public var problem: Problem
        public var expected: String
        public var actual: String?
    }

    public var deployment: String
    public var buildId: String
    public var filesChecked: Int
    /// Files whose content was hashed (all with --full; those the stat cache could not vouch for otherwise).
    public var filesHashed: Int
    /// Symbolic links and empty folders checked.
    public var entriesChecked = 0
    public var damaged: [Damage]
    /// The repaired build staged by --repair, ready for the next apply.
    public var repairStaged: String?
    /// True when --now applied the repair at once.
    public var applied = false
}

extension Install {
    /// Checks the live tree against its manifest: size and mode of every file, and its
    /// SHA-256 where the stat cache cannot vouch for it (or always, with `full`).
    public func verify(full: Bool) throws(PatchSyncError) -> VerifyReport {
        let lock = try lock(.live, for: "verify")
        defer { withExtendedLifetime(lock) {} }
        let state = try state()
        try reconcile(state)  // an apply killed after its flip is finished first: the records name what is checked
        guard let deployment = currentDeployment() else {
            throw PatchSyncError(.usage, "\(root) has no build installed", remedy: "run `patchsync sync` and `patchsync apply`")
        }
        let build = Deployment.buildID(of: deployment)
        try dropTamperedReady(state)  // no record names a ready tree that was removed or changed by hand
        var files = try state.buildFiles(build: deployment)
        if files.isEmpty {  // recorded when the build was staged; the manifest serves older installs
            let cache = try state.statCache(build: deployment)
            files = try Syncer(install: self).loadManifest(deployment).files.map {
                (
                    StateStore.BuildFile(
                        path: $0.path, size: $0.size, mode: Install.installedMode($0.mode),
                        sha256: $0.sha256.hex), cache[$0.path]
                )
            }
        }
        let directory = buildDirectory(deployment)
        var report = VerifyReport(deployment: deployment, buildId: build, filesChecked: 0, filesHashed: 0, damaged: [])
        var refreshed: [String: StateStore.FileStat] = [:]
        for (file, cached) in files {
            report.filesChecked += 1
            let (damage, hashed, stat) = check(file, at: directory + "/" + file.path, cache: cached, full: full)
            if hashed { report.filesHashed += 1 }
            if let damage {
                report.damaged.append(damage)
            } else if let stat, stat != cached {
                refreshed[file.path] = stat
            }
        }
        if !refreshed.isEmpty { try state.saveStatCache(build: deployment, refreshed) }
        // Links and empty folders are in the manifest only: without it they would go unchecked.
        let manifest = try Syncer(install: self).loadManifest(deployment)
        report.entriesChecked = (manifest.links?.count ?? 0) + (manifest.folders?.count ?? 0)
        report.damaged += TreeEntries.check(manifest, in: directory)
        return report
    }

    private func check(
        _ file: StateStore.BuildFile, at path: String, cache: StateStore.FileStat?,
        full: Bool
    ) -> (VerifyReport.Damage?, Bool, StateStore.FileStat?) {
        func damage(_ problem: VerifyReport.Problem, _ expected: String, _ actual: String?) -> VerifyReport.Damage {
            VerifyReport.Damage(path: file.path, problem: problem, expected: expected, actual: actual)
        }
        guard let st = try? FileSystem.status(path), (st.st_mode & S_IFMT) == S_IFREG else {
            return (damage(.missing, "a file of \(file.size) bytes", nil), false, nil)
        }
        guard Int64(st.st_size) == file.size else {
            return (damage(.wrongSize, "\(file.size) bytes", "\(st.st_size) bytes"), false, nil)
        }
        let mode = UInt32(st.st_mode) & 0o7777, expected = file.mode
        guard mode == expected else {
            return (damage(.wrongMode, String(expected, radix: 8), String(mode, radix: 8)), false, nil)
        }
        let stat = StateStore.FileStat(st)
        if !full && cache == stat { return (nil, false, stat) }
        guard let sha = try? SHA256Hasher.hash(file: path) else {
            return (damage(.missing, "a readable file", "unreadable"), true, nil)
        }
        return sha.hex == file.sha256 ? (nil, true, stat) : (damage(.wrongHash, file.sha256, sha.hex), true, nil)
    }
}

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
        let manifest = try loadManifest(report.deployment)
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
            install: install, config: config, state: state, origin: try Origin(config, client: client),
            onEvent: onEvent)
        context.sealed = try await sealedSource(for: manifest, context: context)  // a build that was a preload
        var sync = SyncReport(outcome: .ready, buildId: report.buildId, sequence: manifest.sequence)
        try await stage(
            manifest, into: StagedBuild(identity, in: install, state: state), live: live, context: context,
            report: &sync)
        if let source = context.sealed { source.store.prune(keeping: source.keep) }
        return identity.name
    }
}
