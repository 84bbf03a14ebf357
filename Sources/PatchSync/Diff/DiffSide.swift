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
            return (try Syncer(install: install).loadManifest(build), "\(build) (installed in \(install.root))")
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
}
