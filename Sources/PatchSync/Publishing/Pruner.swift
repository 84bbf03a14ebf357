import Foundation

/// `repo prune`: removes from an origin the objects, packs, delta packs, manifests and metadata
/// versions that no build a client could still ask for needs.
///
/// What a client could still ask for: every build that targets.json lists now (after keeping the newest
/// `keep` of each channel), and every build listed by a targets version that was current at any moment
/// of the grace period, since a client that read it then may still be fetching that build's objects.
/// A version stops being current when the next one is written: the next version file's modification
/// time says when (a copy that reset the times only makes prune keep more). Root versions are never
/// removed: a client several rotations behind walks through each.
public struct Pruner: Sendable {
    public struct Options: Sendable {
        /// Builds of each channel that stay listed (the newest by sequence).
        public var keep: Int
        /// How long a build stays in the origin after the last targets version that listed it went.
        public var grace: TimeInterval = 7 * 86400
        public var dryRun = false
        public var now = Date()
        /// The snapshot and targets versions a bucket serving this origin serves now: they and every later
        /// version count as current, whatever the folder's file times say (an upload may have come late).
        public var served: (snapshot: Int, targets: Int)?

        public init(keep: Int) { self.keep = keep }
    }

    /// One file prune removes (or would remove, for a dry run), relative to the origin.
    public struct Removal: Codable, Sendable, Equatable {
        public enum Kind: String, Codable, Sendable { case object, manifest, metadata, incoming }
        public var path: String
        public var kind: Kind
        public var bytes: Int64
    }

    /// What a prune did (or would do).
    public struct Report: Codable, Sendable {
        public var origin: String
        public var dryRun: Bool
        /// `channel/build` of each build targets.json lists after the prune.
        public var listed: [String]
        /// Builds no longer listed whose content stays until the grace period has passed.
        public var held: [String]
        /// Builds that targets.json stopped listing in this run (their content is held for the grace).
        public var unlisted: [String]
        /// The grace period: how long a build stays after the last targets version that listed it stopped
        /// being current (a player that read that version may still be fetching the build).
        public var graceSeconds: Int64
        public var removed: [Removal]
        public var bytesFreed: Int64
        public var warnings: [String] = []

        public func count(_ kind: Removal.Kind) -> Int { removed.filter { $0.kind == kind }.count }
    }

    public let origin: String
    public let options: Options
    /// Needed only when a channel lists more than `keep` builds: targets.json is signed again without them.
    public let signers: Repository.Signers?

    private var layout: OriginLayout { OriginLayout(root: origin) }

    public init(origin: String, options: Options, signers: Repository.Signers? = nil) {
        self.origin = origin
        self.options = options
        self.signers = signers
    }

    /// Plans the prune and, unless a dry run, runs it: first `removeRemote` (a bucket that serves the
    /// same origin) gets every path, then the files go from the origin folder, objects first and
    /// metadata last, so that a prune stopped half way is finished by the next one.
    public func run(
        removeRemote: (Repository, [Removal]) throws(PatchSyncError) -> Void = { _, _ throws(PatchSyncError) in }
    )
        throws(PatchSyncError) -> Report
    {
        guard options.keep >= 1 else {
            throw PatchSyncError(
                .usage, "--keep \(options.keep) would leave a channel without a build", remedy: "keep at least 1")
        }
        var repo = try Repository.open(origin: origin, for: "pruning")
        var unlisted: [String] = []
        // Beyond the keep rule, and the build targets no channel reading lists (no player reads them).
        let beyond =
            Publisher.beyondKept(repo.targetFiles, keep: options.keep, installable: repo.isReleased)
            + repo.unlistedTargetPaths()
        // The versions current when the prune began: unlisting supersedes them now (in a dry run, as it would).
        let before = (targets: repo.targetsVersion, snapshot: repo.snapshotVersion, files: repo.targetFiles)
        var kept = repo.targetFiles
        for path in beyond { kept[path] = nil }
        if !beyond.isEmpty {
            unlisted = beyond.compactMap { repo.targetFiles[$0]?.custom }.map { "\($0.channel)/\($0.buildId)" }.sorted()
            if !options.dryRun {
                guard let signers else {
                    throw PatchSyncError(
                        .usage,
                        "targets.json of \(origin) lists \(unlisted.count) build(s) beyond the newest "
                            + "\(options.keep) of their channel: it must be signed again without them",
                        remedy: "give --targets-key and --online-key, or a --keep of at least the builds listed "
                            + "(`patchsync repo status --origin \(origin)`)")
                }
                // Through the one writer of targets: its keep rule and the channels' records hold here too.
                try TargetWriter(origin: origin, signers: signers, keepBuilds: options.keep, now: options.now).commit(
                    kept, repo: &repo)
            }
        }
        // What clients may still ask for: the targets as this prune leaves them, and every version of the
        // grace (``liveVersions``). A version this prune supersedes stopped being current now: within any
        // grace, and gone with none, the same in a dry run as in the real one.
        let superseded = beyond.isEmpty ? nil : before
        var listings: [(version: Int?, targets: [String: TargetFile])] = [(nil, kept)]
        // The real run lists what the writer signed, a channel's record it added included.
        if !options.dryRun, superseded != nil { listings[0] = (repo.targetsVersion, repo.targetFiles) }
        let live = try liveVersions(
            "targets", current: before.targets, servedFrom: options.served?.targets, superseded: superseded != nil)
        for version in live where superseded != nil || version != before.targets {
            listings.append(
                (version, version == before.targets ? before.files : try Self.targets(of: origin, version: version)))
        }
        var needed = Set<String>(), builds = Set<String>()
        for (version, targets) in listings {
            for (path, file) in targets {
                if file.channelRecord != nil, let hash = file.hashes["sha256"] {
                    needed.insert(OriginLayout.targetFile(path, sha256: hash))  // a channel's record
                    continue
                }
                guard let info = file.custom else { continue }
                builds.insert("\(info.channel)/\(info.buildId)")
                // A build only an older version lists, whose manifest an earlier prune (stopped half way, or
                // with a shorter grace) already removed, has nothing left to keep.
                if version != nil, version != repo.targetsVersion, let hash = file.hashes["sha256"],
                    !FileSystem.exists(layout.path(OriginLayout.targetFile(path, sha256: hash)))
                {
                    continue
                }
                try need(path, file, into: &needed)
            }
        }
        // In a dry run that unlists, the version on disk is the one superseded: the run's own goes unwritten.
        let written = options.dryRun && superseded != nil ? [] : [repo.targetsVersion]
        for version in live + written { needed.insert(OriginLayout.metadata(role: "targets", version: version)) }
        needed.formUnion(BuildContents.releasedKeys(of: repo))
        let snapshots = try liveVersions(
            "snapshot", current: before.snapshot, servedFrom: options.served?.snapshot, superseded: superseded != nil)
        for version in snapshots + (options.dryRun && superseded != nil ? [] : [repo.snapshotVersion]) {
            needed.insert(OriginLayout.metadata(role: "snapshot", version: version))
        }
        let listed = kept.values.compactMap(\.custom).map { "\($0.channel)/\($0.buildId)" }.sorted()
        var report = Report(
            origin: origin, dryRun: options.dryRun, listed: listed,
            held: builds.subtracting(listed).sorted(), unlisted: unlisted,
            graceSeconds: Int64(min(options.grace.rounded(.up), 1e15)),
            removed: try removals(keeping: needed), bytesFreed: 0, warnings: repo.expiryWarnings(now: options.now))
        report.bytesFreed = report.removed.reduce(0) { $0 + $1.bytes }
        guard !options.dryRun, !report.removed.isEmpty else { return report }
        try removeRemote(repo, report.removed.filter { $0.kind != .incoming })
        for removal in report.removed {
            do { try FileSystem.remove(layout.path(removal.path)) } catch  where error.code == ENOENT {} catch {
                throw PatchSyncError.wrap(error).during("pruning \(origin)")
            }
        }
        try removeEmptyFolders(layout.targetsFolder)
        withExtendedLifetime(repo) {}  // the origin's lock, held to the last removal
        return report
    }

    /// Adds what the build of manifest target `path` needs (``BuildContents``).
    private func need(_ path: String, _ file: TargetFile, into needed: inout Set<String>) throws(PatchSyncError) {
        do { needed.formUnion(try BuildContents.paths(in: origin, target: path, file)) } catch {
            throw error.during("reading the manifest of \(path), which a client may still ask for; no file was removed")
        }
    }

    /// The versions of `role` a client may still hold: the current one and each one whose successor
    /// was written within the grace period (a version whose successor is gone went long ago).
    /// `superseded`: this prune writes the next version (or would, in a dry run), so `current` stopped
    /// being current now: it stays for any grace above zero, or while a bucket serves it.
    private func liveVersions(_ role: String, current: Int, servedFrom: Int?, superseded: Bool = false)
        throws(PatchSyncError) -> [Int]
    {
        let since = options.now.timeIntervalSince1970 - options.grace
        let servedNow = servedFrom.map { current >= $0 } ?? false
        var live = !superseded || options.grace > 0 || servedNow ? [current] : []
        for version in try versions(role) where version < current {
            if let servedFrom, version >= servedFrom {
                live.append(version)
                continue
            }
            guard let next = try modified(layout.path(OriginLayout.metadata(role: role, version: version + 1))),
                next >= since
            else { continue }
            live.append(version)
        }
        return live
    }

    /// The versions of `role` whose files the metadata folder holds.
    private func versions(_ role: String) throws(PatchSyncError) -> [Int] {
        do {
            return try FileSystem.list(layout.metadataFolder).compactMap {
                OriginLayout.version(ofMetadataName: $0, role: role)
            }
        } catch { throw PatchSyncError.wrap(error) }
    }

    private static func targets(of origin: String, version: Int) throws(PatchSyncError) -> [String: TargetFile] {
        let path = OriginLayout(root: origin).path(OriginLayout.metadata(role: "targets", version: version))
        let signed: Signed<TargetsMetadata> = try Signed(
            parsing: try FileSystem.read(path, limit: 64 << 20), name: path)
        return signed.signed.targets
    }

    /// Every file of objects/, targets/ and the snapshot and targets versions of metadata/ that is not
    /// in `needed`, and what a killed publish left in objects/.incoming and its subfolders before the
    /// grace period (``staleTemporaries(in:)``).
    private func removals(keeping needed: Set<String>) throws(PatchSyncError) -> [Removal] {
        var found: [Removal] = []
        for (path, bytes) in try BuildContents.files(of: origin) where !OriginLayout.isNeeded(path, in: needed) {
            if OriginLayout.isObject(path) {
                found.append(Removal(path: path, kind: .object, bytes: bytes))
            } else if OriginLayout.isTarget(path) {
                found.append(Removal(path: path, kind: .manifest, bytes: bytes))
            } else if OriginLayout.isVersionedMetadata(path, role: "snapshot")
                || OriginLayout.isVersionedMetadata(path, role: "targets")
            {
                found.append(Removal(path: path, kind: .metadata, bytes: bytes))
            }
        }
        let incoming = layout.incomingFolder
        do {
            if FileSystem.isDirectory(incoming) { found += try staleTemporaries(in: OriginLayout.incoming) }
        } catch { throw PatchSyncError.wrap(error).during("listing \(incoming)") }
        let order: [Removal.Kind] = [.incoming, .object, .manifest, .metadata]
        return found.sorted {
            (order.firstIndex(of: $0.kind) ?? 0, $0.path) < (order.firstIndex(of: $1.kind) ?? 0, $1.path)
        }
    }

    /// The temporary files a killed publish left in `folder` (relative to the origin) and its subfolders,
    /// at any depth: ``ObjectWriter`` and ``PackWriter`` write in `objects/.incoming/0` to `15`, ``Sealer``
    /// and delta packs in `objects/.incoming` itself. Only regular files last modified before the grace
    /// period; links are not followed, and the folders stay. No publish writes there while prune runs:
    /// it holds the origin's lock (``OriginLock``) from start to end, as every publish does.
    private func staleTemporaries(in folder: String) throws(Errno) -> [Removal] {
        let cutoff = options.now.timeIntervalSince1970 - options.grace
        var found: [Removal] = []
        for name in try FileSystem.list(layout.path(folder)) {
            let path = folder + "/" + name
            guard let st = try FileSystem.status(layout.path(path)) else { continue }
            if (st.st_mode & S_IFMT) == S_IFDIR {
                found += try staleTemporaries(in: path)
            } else if (st.st_mode & S_IFMT) == S_IFREG, Double(st.st_mtim.tv_sec) < cutoff {
                found.append(Removal(path: path, kind: .incoming, bytes: Int64(st.st_size)))
            }
        }
        return found
    }

    /// Removes the folders under `path` that pruning left empty (manifests of a channel all gone).
    private func removeEmptyFolders(_ path: String) throws(PatchSyncError) {
        do {
            for name in try FileSystem.subdirectories(path) {
                try removeEmptyFolders(path + "/" + name)
                if try FileSystem.list(path + "/" + name).isEmpty { rmdir(path + "/" + name) }
            }
        } catch let error as PatchSyncError { throw error } catch { throw PatchSyncError.wrap(error) }
    }

    private func modified(_ path: String) throws(PatchSyncError) -> Double? {
        do { return try FileSystem.status(path).map { Double($0.st_mtim.tv_sec) } } catch {
            throw PatchSyncError.wrap(error)
        }
    }
}
