import Foundation

/// The description of one build: its bundles and files, and for every file its chunks.
///
/// Clients trust a manifest only as a TUF target whose length and hash the
/// signed targets metadata pins. Its JSON Schema is `manifests/manifest.schema.json`.
public struct Manifest: Codable, Hashable, Sendable {
    /// 2: a file's object may be a pack holding many files' chunks (1: always the file's own object).
    /// 3: the build also has symbolic links or empty folders (`links`, `folders`), which a client of
    /// version 2 would silently leave out.
    /// 4: some objects are sealed (a preload build's new content, `sealed`), which a client of version 3
    /// would fetch by a name the origin does not have.
    /// 5: some chunks are zstd frames (`codec` `zstd`), which a client of version 4 cannot read.
    /// 6: objects are named `<sha256>.bin` and an object over 256 MiB spans segment files
    /// (``ObjectNaming``), which a client of version 5 would fetch by names the origin does not have.
    /// 7: a chunk may sit in another object than its file's (`object` on the chunk): a publish stores only
    /// the chunks no kept build has, and a client of version 6 would read those chunks from the wrong object.
    /// 8: the manifest is binary (``ManifestBinary``: sorted path, chunk, object and string tables, read in
    /// one pass) and its target zstd-compressed; a client of version 7 cannot parse it (it says the target
    /// is not a manifest), and from 8 on the binary header names the version it refuses. Its JSON view (this
    /// type's `Codable` form) is what `manifests/manifest.schema.json` documents.
    /// A client reads every version up to its own and refuses a newer one, naming both.
    public static let formatVersion = 8

    public var formatVersion: Int
    public var buildId: BuildID
    public var channel: Channel
    public var sequence: Int
    public var chunking: ChunkingParameters
    public var bundles: [Bundle]
    public var files: [FileEntry]
    /// Delta packs from recent builds (absent when there are none).
    public var deltas: [DeltaSource]?
    /// Symbolic links of the build, each resolving inside it (format 3; absent when there are none).
    public var links: [LinkEntry]?
    /// Folders of the build with nothing in them (format 3; absent when there are none). Folders that
    /// hold a file or a link are implied by their paths.
    public var folders: [FolderEntry]?
    /// The objects (and delta packs) of a preload build stored sealed, by plain object (format 4).
    public var sealed: [SealedObject]?

    /// The total size of all files.
    public var totalSize: Int64 { files.reduce(0) { $0 + $1.size } }
}

/// A build id such as `1.4.2+873`: letters, digits and `.+_-`, not starting with a dot.
public struct BuildID: Codable, Hashable, Sendable, CustomStringConvertible, Comparable {
    public let value: String

    public init(_ value: String) throws(PatchSyncError) {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+_-")
        guard !value.isEmpty, value.count <= 128, !value.hasPrefix("."), value.allSatisfy(allowed.contains) else {
            throw PatchSyncError(
                .usage, "'\(value)' is not a usable build id",
                remedy: "use letters, digits and . + _ - (at most 128), e.g. 1.4.2+873")
        }
        self.value = value
    }

    public var description: String { value }
    public static func < (a: Self, b: Self) -> Bool { a.value < b.value }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { self = try BuildID(text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(value)
    }
}

/// A release channel such as `live` or `beta`: lowercase letters, digits and `-`.
public struct Channel: Codable, Hashable, Sendable, CustomStringConvertible {
    public let name: String

    public init(_ name: String) throws(PatchSyncError) {
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-")
        guard !name.isEmpty, name.count <= 64, name.allSatisfy(allowed.contains) else {
            throw PatchSyncError(
                .usage, "'\(name)' is not a usable channel name",
                remedy: "use lowercase letters, digits and -, e.g. live or beta")
        }
        self.name = name
    }

    /// The default channel.
    public static let live = Channel(validated: "live")

    private init(validated name: String) { self.name = name }
    public var description: String { name }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        do { self = try Channel(text) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.message))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(name)
    }
}

/// A named group of files that goes live together.
public struct Bundle: Codable, Hashable, Sendable {
    public var name: String
    public var required: Bool
    /// Lower numbers download first.
    public var priority: Int
    /// Glob patterns (`*` within a folder, `**` across folders, `?` one character).
    public var paths: [String]

    public init(name: String, required: Bool, priority: Int, paths: [String]) {
        self.name = name
        self.required = required
        self.priority = priority
        self.paths = paths
    }

    /// The default: one required bundle `base` holding every file.
    public static let base = Bundle(name: "base", required: true, priority: 0, paths: ["**"])
}

/// A delta pack: the deltas that rebuild this build's changed files from build `from`'s files.
public struct DeltaSource: Codable, Hashable, Sendable {
    public var from: BuildID
    /// The pack's SHA-256, which names its object.
    public var object: SHA256Digest
    public var length: Int64
    /// How many files the pack rebuilds.
    public var files: Int
    /// The indices in the manifest's `files` of the files the pack rebuilds, ascending (written since
    /// format 6): a client knows before downloading the pack which chunks it still fetches, so a download
    /// page's total is right from the first byte.
    public var covers: [Int]? = nil
    /// The files the pack rebuilds from another path of build `from` than their own (format 8): target path
    /// → source path. A new file is given the old file of the same name in another folder (a track or a
    /// texture that moved, a copy edited): on SuperTuxKart 1.4 → 1.5, 79 new files, 6.3 MB less to fetch.
    public var moved: [String: String]? = nil
    /// In a manifest narrowed to some bundles (``Manifest/selecting(_:)``): the index in the narrowed
    /// `files` of each file of the full list it kept, for the pack's own file indices (not encoded).
    var narrowed: [Int: Int]? = nil

    enum CodingKeys: String, CodingKey {
        case from, object, length, files, covers, moved
    }
}

/// One file of a build.
public struct FileEntry: Codable, Hashable, Sendable {
    public var path: String
    public var size: Int64
    /// Permission bits as in the build folder (0644, 0755); installs make them read-only.
    public var mode: UInt32
    public var sha256: SHA256Digest
    /// The object holding this content: the file's SHA-256, or a pack of small files (format 2).
    public var object: SHA256Digest
    public var bundle: String
    public var chunks: [ChunkEntry]
}

/// A symbolic link of a build: its path and the relative target it holds, which resolves inside the
/// build (through the build's other links too).
public struct LinkEntry: Codable, Hashable, Sendable {
    public var path: String
    public var target: String
    public var bundle: String

    public init(path: String, target: String, bundle: String) {
        self.path = path
        self.target = target
        self.bundle = bundle
    }
}

/// An empty folder of a build.
public struct FolderEntry: Codable, Hashable, Sendable {
    public var path: String
    public var bundle: String

    public init(path: String, bundle: String) {
        self.path = path
        self.bundle = bundle
    }
}

/// How a chunk is stored inside its object.
public enum ChunkCodec: String, Codable, Sendable {
    /// A zlib stream (RFC 1950) of deflate.
    case zlib
    /// Stored as it is.
    case raw
    /// A zstd frame (RFC 8878; format 5).
    case zstd
}

/// One content-defined chunk of a file, and where its stored bytes sit in the object.
public struct ChunkEntry: Codable, Hashable, Sendable {
    /// Offset of the chunk in the file.
    public var offset: Int64
    public var length: Int
    public var sha256: SHA256Digest
    public var objectOffset: Int64
    public var objectLength: Int
    public var codec: ChunkCodec
    /// The object holding the chunk's stored bytes when it is not the file's own `object` (format 7): a
    /// chunk an earlier build already stored stays where it is.
    public var object: SHA256Digest? = nil

    /// This chunk naming no object of its own (it is in its file's).
    var withoutObject: ChunkEntry {
        var chunk = self
        chunk.object = nil
        return chunk
    }

    /// The object holding this chunk of `file`.
    public func object(in file: FileEntry) -> SHA256Digest { object ?? file.object }
}

extension FileEntry {
    /// Every object the file's chunks sit in, in the order of their first chunk.
    public var objects: [SHA256Digest] {
        var seen = Set<SHA256Digest>(), out: [SHA256Digest] = []
        for chunk in chunks where seen.insert(chunk.object(in: self)).inserted { out.append(chunk.object(in: self)) }
        return out
    }

    /// Whether every chunk sits in the file's own object (as before format 7).
    public var isWhole: Bool { chunks.allSatisfy { $0.object == nil || $0.object == object } }
}
