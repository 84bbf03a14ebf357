import Foundation

/// One side of a `diff`: a build's manifest, a name for reports, and, where this machine can read them,
/// what the delta pack a publish would write needs (DiffSide+Deltas.swift).
public struct DiffSide: Sendable {
    public var manifest: Manifest
    /// The build and where it came from, for reports.
    public var name: String
    /// What the side was loaded from: a path or an origin URL.
    public var spec: String
    /// Reads this build's files when a publish of a build folder would give it a delta pack: a build
    /// folder's own files, or the objects of a `file://` origin for a build among the delta sources.
    var content: (any FileContentSource)? = nil
    /// The folder, when this side is a build folder (the files a publish would read).
    var buildFolder: String? = nil
    /// For an origin's build: the bytes of its signed top-level metadata (timestamp, snapshot, targets),
    /// which a player fetches again when a build is published.
    var signedMetadataBytes: Int64? = nil
    /// For a `file://` origin's build: its files, read from the origin's objects (the target of the delta
    /// packs `repo promote` writes when it lists this build on another channel).
    var objects: (any FileContentSource)? = nil
    /// For an install: what it holds, verified as a sync sees it (the live build, the ready tree, the
    /// builds kept for rollback), so that the patch is costed as its sync plans it.
    var local: LiveTree? = nil
    /// For an install: its configuration, whose bundle choice its sync applies to any NEW.
    var installConfig: InstallConfig? = nil

    /// Loads a side from `spec`: an origin URL (`http(s)://` or `file://`, with `#BUILD` for a given build,
    /// else the channel's newest; `#BUILD@CHANNEL` for one of another channel), verified through the TUF chain from `root`; an install folder (its current
    /// build); a build folder (chunked on the fly, nothing written); or a manifest file (a target as served, or its JSON view).
    /// `deltaSources` is publish's option: how many of the channel's latest builds get a delta pack to a
    /// newly published build (0: none, and no side is a delta's source).
    public static func load(
        _ spec: String, root: String?, channel: String, bundles: BundleRules,
        deltaSources: Int = 2, exclude: ExcludeRules = .none
    ) async throws(PatchSyncError) -> DiffSide {
        let lower = spec.lowercased()
        if lower.hasPrefix("http://") || lower.hasPrefix("https://") || lower.hasPrefix("file://") {
            return try await fromOrigin(spec, root: root, channel: try Channel(channel), deltaSources: deltaSources)
        }
        if FileSystem.exists(InstallLayout(root: spec).configFile) {
            let install = try Install.open(at: spec)
            guard let current = install.currentDeployment() else {
                throw PatchSyncError(.usage, "\(spec) has no build installed", remedy: "sync and apply it first")
            }
            let build = Deployment.buildID(of: current)
            var side = DiffSide(
                manifest: try install.manifest(of: current), name: "\(build) (installed in \(install.root))", spec: spec
            )
            side.local = try install.liveTrees(state: try install.state())
            side.installConfig = try install.config()
            return side
        }
        if FileSystem.isDirectory(spec) {
            var side = DiffSide(
                manifest: try Publisher.describe(buildDirectory: spec, bundles: bundles, exclude: exclude),
                name: "build folder \(spec)", spec: spec, buildFolder: spec)
            if deltaSources > 0 { side.content = BuildFolderReader(directory: spec) }
            return side
        }
        guard FileSystem.exists(spec) else {
            throw PatchSyncError(
                .usage, "\(spec) is neither a manifest, a build folder, an install nor a URL",
                remedy: "give a manifest file, a folder, or an origin URL with --root")
        }
        let manifest = try Manifest.decode(
            try FileSystem.read(spec, limit: Manifest.maximumInflatedSize), what: spec, jsonView: true)
        return DiffSide(manifest: manifest, name: "\(manifest.buildId) (\(spec))", spec: spec)
    }

    /// The build of an origin URL. A `file://` origin's build among the channel's latest `deltaSources`
    /// can be a delta's source: its objects are read from the origin folder.
    private static func fromOrigin(
        _ spec: String, root: String?, channel: Channel,
        deltaSources: Int
    ) async throws(PatchSyncError) -> DiffSide {
        guard let root else {
            throw PatchSyncError(
                .usage, "\(spec) is an origin: its manifest is verified from a trusted root",
                remedy: "add --root ROOT_JSON (the root.json the game ships)")
        }
        var parts = spec.split(separator: "#", maxSplits: 1).map(String.init)
        // `#BUILD@CHANNEL` reads the build of another channel (a build id never holds '@'): the route of a promote.
        var channel = channel
        if parts.count > 1, let at = parts[1].lastIndex(of: "@") {
            channel = try Channel(String(parts[1][parts[1].index(after: at)...]))
            parts[1] = String(parts[1][..<at])
            if parts[1].isEmpty { parts.removeLast() }
        }
        let metadata = NSTemporaryDirectory() + "patchsync-diff-\(UUID().uuidString)"
        defer { try? FileSystem.removeTree(metadata) }
        do {
            try FileSystem.writeAtomically(
                try FileSystem.read(root, limit: Int(TrustClient.maxRootBytes)),
                to: metadata + "/" + OriginLayout.rootName)
        } catch { throw PatchSyncError.wrap(error) }
        let origin = try Origin(mirrors: [parts[0]], client: try HTTPClient())
        let trusted = try await TrustClient(directory: metadata, source: origin, now: Date(), deadline: Date() + 120)
            .refresh()
        let target = try ManifestTarget(
            in: trusted.targets.signed, channel: channel, build: parts.count > 1 ? parts[1] : nil)
        let (manifest, _) = try await origin.manifest(target)
        var side = DiffSide(manifest: manifest, name: "\(manifest.buildId) (\(parts[0]))", spec: spec)
        let snapshotBytes = trusted.timestamp.signed.meta[OriginLayout.snapshotName]?.length ?? 0
        let targetsBytes = trusted.snapshot.signed.meta[OriginLayout.targetsName]?.length ?? 0
        side.signedMetadataBytes = Int64(try trusted.timestamp.serialized().count + snapshotBytes + targetsBytes)
        let sources = Publisher.deltaSourceTargets(
            trusted.targets.signed.targets, channel: channel.name, count: deltaSources)
        if let folder = localFolder(of: parts[0]) {
            let reader = ObjectReader(origin: folder, naming: ObjectNaming(format: manifest.formatVersion))
            side.objects = reader
            if sources.contains(where: { $0.path == target.path }) { side.content = reader }
        }
        return side
    }

    /// The folder of a `file://` origin URL, when it holds objects.
    private static func localFolder(of url: String) -> String? {
        guard url.lowercased().hasPrefix("file://"), let path = URL(string: url)?.path,
            FileSystem.isDirectory(OriginLayout(root: path).objectsFolder)
        else { return nil }
        return path
    }
}

extension PatchDiff {
    /// The patch from side `old` to side `new`, for a player who chose the optional bundles `chosen`
    /// (nil: every bundle; an install's own choice is already applied). An install costs it with what it
    /// holds (kept builds and the ready tree too), any other side as a player holding exactly its build.
    public init(from old: DiffSide, to new: DiffSide, deltas: [String: Int64], chosen: [String]?) {
        // An install's own choice (its excluded bundles too) is what its sync applies to NEW.
        let installs = chosen == nil ? old.installConfig.map { $0.selection(of: new.manifest) } : nil
        func pick(_ manifest: Manifest) -> Manifest {
            chosen.map { manifest.selecting(BundleSelection(manifest, chosen: $0).wanted) } ?? manifest
        }
        let before = pick(old.manifest)
        let after = installs.map { new.manifest.selecting($0.wanted) } ?? pick(new.manifest)
        self.init(
            old: before, new: after, oldName: old.name, newName: new.name, deltas: deltas,
            local: old.local ?? LiveTree(holding: [before]))
        if let chosen { selection = BundleSelection(new.manifest, chosen: chosen).wanted }
        if let installs { selection = installs.wanted }
    }
}
