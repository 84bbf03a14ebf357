import Foundation

/// What the install state keeps of a deployment's manifest so that an up-to-date sync, `status` and
/// `bundles` read no manifest: the build's bundles (the player's selection is made of them), each
/// bundle's installed size and file count, and how many links and empty folders the build has.
/// A few hundred bytes whatever the number of files.
public struct BuildSummary: Codable, Sendable, Hashable {
    public var buildId: String
    public var bundles: [Bundle]
    /// Per bundle: its files' total size.
    public var bundleBytes: [String: Int64]
    /// Per bundle: how many files it has.
    public var bundleFiles: [String: Int]
    public var links: Int
    public var folders: Int

    public init(_ manifest: Manifest) {
        buildId = manifest.buildId.value
        bundles = manifest.bundles
        bundleBytes = manifest.bundleSizes
        var files = Dictionary(uniqueKeysWithValues: manifest.bundles.map { ($0.name, 0) })
        for file in manifest.files { files[file.bundle, default: 0] += 1 }
        bundleFiles = files
        links = manifest.links?.count ?? 0
        folders = manifest.folders?.count ?? 0
    }

    /// The selection `chosen` (nil: every optional bundle but `excluded`) makes of this build.
    func selection(chosen: [String]?, excluded: [String] = []) -> BundleSelection {
        BundleSelection(bundles: bundles, chosen: chosen, excluded: excluded)
    }
}
