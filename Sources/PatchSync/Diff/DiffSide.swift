import Foundation

/// One side of a `diff`: where a build's manifest comes from.
public enum DiffSide {
    /// Loads a manifest from `spec`: an origin URL (`http(s)://` or `file://`, with `#BUILD` for a given build,
    /// else the channel's newest), verified through the TUF chain from `root`; an install folder (its current
    /// build); a build folder (chunked on the fly, nothing written); or a manifest file (`.json` or `.json.gz`).
    /// Returns the manifest and a name for reports.
    public static func load(_ spec: String, root: String?, channel: String,
                            bundles: BundleRules) async throws(PatchSyncError) -> (Manifest, String) {
        let lower = spec.lowercased()
        if lower.hasPrefix("http://") || lower.hasPrefix("https://") || lower.hasPrefix("file://") {
            return try await fromOrigin(spec, root: root, channel: try Channel(channel))
        }
        if FileSystem.exists(spec + "/.patchsync/config.json") {
            let install = try Install.open(at: spec)
            guard let current = install.currentDeployment() else {
                throw PatchSyncError(.usage, "\(spec) has no build installed", remedy: "sync and apply it first")
            }
            let build = Deployment.buildID(of: current)
            return (try Syncer(install: install).loadManifest(current), "\(build) (installed in \(install.root))")
        }
        if FileSystem.isDirectory(spec) {
            return (try Publisher.describe(buildDirectory: spec, bundles: bundles), "build folder \(spec)")
        }
        guard FileSystem.exists(spec) else {
            throw PatchSyncError(.usage, "\(spec) is neither a manifest, a build folder, an install nor a URL",
                                 remedy: "give a manifest file, a folder, or an origin URL with --root")
        }
        let manifest = try Manifest.decode(try FileSystem.read(spec, limit: Manifest.maximumInflatedSize), what: spec)
        return (manifest, "\(manifest.buildId) (\(spec))")
    }

    private static func fromOrigin(_ spec: String, root: String?,
                                   channel: Channel) async throws(PatchSyncError) -> (Manifest, String) {
        guard let root else {
            throw PatchSyncError(.usage, "\(spec) is an origin: its manifest is verified from a trusted root",
                                 remedy: "add --root ROOT_JSON (the root.json the game ships)")
        }
        let parts = spec.split(separator: "#", maxSplits: 1).map(String.init)
        let metadata = NSTemporaryDirectory() + "patchsync-diff-\(UUID().uuidString)"
        defer { try? FileSystem.removeTree(metadata) }
        do {
            try FileSystem.writeAtomically(try FileSystem.read(root, limit: Int(TrustClient.maxRootBytes)),
                                           to: metadata + "/root.json")
        } catch { throw PatchSyncError.wrap(error) }
        let origin = try Origin(mirrors: [parts[0]], client: try HTTPClient())
        let trusted = try await TrustClient(directory: metadata, source: origin, now: Date(), deadline: Date() + 120).refresh()
        let target = try ManifestTarget(in: trusted.targets.signed, channel: channel, build: parts.count > 1 ? parts[1] : nil)
        let (manifest, _) = try await origin.manifest(target)
        return (manifest, "\(manifest.buildId) (\(parts[0]))")
    }

    /// For NEW read from an origin URL whose manifest has a delta pack from OLD's build: per path, that
    /// file's share of the pack (its instructions' part of the pack's length). Empty otherwise. The pack
    /// is checked against the SHA-256 that NEW's verified manifest gives.
    public static func deltaShares(new: Manifest, newSpec: String, old: Manifest) async throws(PatchSyncError) -> [String: Int64] {
        let lower = newSpec.lowercased()
        guard lower.hasPrefix("http://") || lower.hasPrefix("https://") || lower.hasPrefix("file://"),
              let pack = new.deltas?.first(where: { $0.from == old.buildId }) else { return [:] }
        let base = String(newSpec.split(separator: "#", maxSplits: 1)[0])
        let temp = NSTemporaryDirectory() + "patchsync-diff-\(UUID().uuidString)/pack"
        defer { try? FileSystem.removeTree(FileSystem.parent(of: temp)) }
        let origin = try Origin(mirrors: [base], client: try HTTPClient())
        _ = try await origin.download(ObjectID.path(pack.object), to: temp, length: pack.length, sha256: pack.object)
        var sizes: [(String, Int64)] = []
        let input: FileDescriptor
        do { input = try FileDescriptor(path: temp, flags: O_RDONLY) } catch { throw PatchSyncError.wrap(error) }
        try DeltaPack.read(input) { (index, instructions) throws(PatchSyncError) in
            guard new.files.indices.contains(index) else { return }
            sizes.append((new.files[index].path, Int64(instructions.count)))
        }
        let total = max(1, sizes.reduce(Int64(0)) { $0 + $1.1 })
        return Dictionary(sizes.map { ($0.0, max(1, $0.1 * pack.length / total)) }, uniquingKeysWith: +)
    }
}
