import Foundation

/// What a manifest holds, counted: the view `patchsync manifest show` prints (the manifest itself is
/// documented by `manifests/manifest.schema.json`).
public struct ManifestSummary: Codable, Sendable, Equatable {
    public var formatVersion: Int
    public var buildId: String
    public var channel: String
    public var sequence: Int
    public var files: Int
    public var links: Int
    public var folders: Int
    /// The files' content, and its stored (compressed) bytes.
    public var bytes: Int64
    public var storedBytes: Int64
    public var chunks: Int
    /// Objects the files' chunks sit in.
    public var objects: Int
    /// Chunks that sit in another object than their file's (format 7: stored by an earlier build).
    public var chunksElsewhere: Int
    /// The most ranges one file's chunks span (``Fragmentation/ranges(_:)``), and that file.
    public var mostRanges: Int
    public var mostRangesFile: String?
    public var bundles: [BundleSummary]
    public var deltas: [DeltaSummary]
    /// Per file, when asked for.
    public var fileList: [FileSummary]?

    public struct BundleSummary: Codable, Sendable, Equatable {
        public var name: String
        public var required: Bool
        public var priority: Int
        public var files: Int
        public var bytes: Int64
    }

    public struct DeltaSummary: Codable, Sendable, Equatable {
        public var from: String
        public var files: Int
        public var bytes: Int64
    }

    public struct FileSummary: Codable, Sendable, Equatable {
        public var path: String
        public var size: Int64
        public var mode: String
        public var bundle: String
        public var chunks: Int
        public var storedBytes: Int64
        public var objects: Int
        public var ranges: Int
    }

    /// Counts `manifest`; `listingFiles` adds a row per file.
    public init(_ manifest: Manifest, listingFiles: Bool = false) {
        formatVersion = manifest.formatVersion
        buildId = manifest.buildId.value
        channel = manifest.channel.name
        sequence = manifest.sequence
        files = manifest.files.count
        links = manifest.links?.count ?? 0
        folders = manifest.folders?.count ?? 0
        bytes = manifest.totalSize
        var stored: Int64 = 0, chunks = 0, elsewhere = 0, most = 0
        var objects = Set<SHA256Digest>(), mostFile: String? = nil, rows: [FileSummary] = []
        for file in manifest.files {
            let fileStored = file.chunks.reduce(Int64(0)) { $0 + Int64($1.objectLength) }
            let ranges = Fragmentation.ranges(file.chunks)
            stored += fileStored
            chunks += file.chunks.count
            elsewhere += file.chunks.filter { $0.object != nil && $0.object != file.object }.count
            objects.formUnion(file.objects)
            if ranges > most { (most, mostFile) = (ranges, file.path) }
            if listingFiles {
                rows.append(
                    FileSummary(
                        path: file.path, size: file.size, mode: String(file.mode, radix: 8), bundle: file.bundle,
                        chunks: file.chunks.count, storedBytes: fileStored, objects: file.objects.count,
                        ranges: ranges))
            }
        }
        (storedBytes, self.chunks, chunksElsewhere, self.objects) = (stored, chunks, elsewhere, objects.count)
        (mostRanges, mostRangesFile) = (most, mostFile)
        bundles = manifest.bundles.map { bundle in
            let members = manifest.files.filter { $0.bundle == bundle.name }
            return BundleSummary(
                name: bundle.name, required: bundle.required, priority: bundle.priority, files: members.count,
                bytes: members.reduce(Int64(0)) { $0 + $1.size })
        }
        deltas = (manifest.deltas ?? []).map { DeltaSummary(from: $0.from.value, files: $0.files, bytes: $0.length) }
        fileList = listingFiles ? rows : nil
    }
}
