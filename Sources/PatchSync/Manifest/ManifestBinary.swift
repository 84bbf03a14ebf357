import Foundation

/// The binary manifest (format 8): what a build's target holds, zstd-compressed on the wire.
///
/// Every table has fixed-width records at 8-byte aligned offsets, so a reader can look a path, a file
/// or a chunk up where the bytes lie (a binary search of the sorted path table) without building a
/// value per file. All integers are little-endian. Its reference reader, written apart from this code,
/// is `manifests/manifest_reader.py`; `patchsync manifest show --decoded` prints the JSON view that
/// `manifests/manifest.schema.json` documents.
///
///     header, 48 bytes
///       0  "PSMF"                     magic
///       4  u32 format version         8
///       8  u32 head length            bytes of the head's JSON
///      12  u32 object count
///      16  u64 file count
///      24  u64 chunk count
///      32  u64 string table length
///      40  u64 reserved, 0
///     head        the manifest without its files as sorted-key JSON (`files` is []), zero-padded to 8
///     objects     object count × 32: the SHA-256 of every object a file or chunk names, ascending, each
///                 named at least once
///     files       file count × 72, by path ascending (bytewise UTF-8), each path once:
///       0  sha256 (32) · 32 i64 size · 40 u64 first chunk · 48 u64 path offset · 56 u32 chunk count ·
///      60 u32 object index · 64 u32 mode · 68 u16 path length · 70 u16 bundle index (into the head's
///         `bundles`)
///     chunks      chunk count × 64, file by file, each file's from its first chunk:
///       0  sha256 (32) · 32 i64 offset in the file · 40 i64 offset in the object · 48 u32 length ·
///      52 u32 stored length · 56 u32 object index (0xFFFFFFFF: the file's own) · 60 u8 codec
///         (0 raw, 1 zlib, 2 zstd) · 61 three zero bytes
///     strings     the paths' UTF-8, file by file, with nothing between or after them
///
/// The layout leaves no byte unaccounted for: the sections follow one another to the end, every
/// path's offset is where the previous path ended, every file's first chunk is where the previous
/// file's chunks ended. Anything else is refused, naming the field.
enum ManifestBinary {
    static let magic: [UInt8] = Array("PSMF".utf8)
    static let headerBytes = 48, objectBytes = 32, fileBytes = 72, chunkBytes = 64
    static let ownObject = UInt32.max
    static let codecs: [ChunkCodec] = [.raw, .zlib, .zstd]

    /// Whether `bytes` begin as a binary manifest does.
    static func isBinary(_ bytes: UnsafeRawBufferPointer) -> Bool {
        bytes.count >= 4 && zip(bytes.prefix(4), magic).allSatisfy { $0 == $1 }
    }

    /// The binary form of `manifest`, whose files are sorted by path.
    static func encode(_ manifest: Manifest) throws(PatchSyncError) -> Data {
        var head = manifest
        head.files = []
        let headJSON: Data
        do { headJSON = try TUFCoding.encoder.encode(head) } catch {
            throw PatchSyncError(.internal, "encoding the manifest of \(manifest.buildId)", cause: error)
        }
        let objects = Array(
            Set(manifest.files.flatMap { file in [file.object] + file.chunks.compactMap(\.object) }).sorted())
        var objectIndex: [SHA256Digest: UInt32] = [:]
        for (i, object) in objects.enumerated() { objectIndex[object] = UInt32(i) }
        let bundleIndex = Dictionary(
            manifest.bundles.enumerated().map { ($1.name, UInt16($0)) }, uniquingKeysWith: { a, _ in a })
        let chunkCount = manifest.files.reduce(0) { $0 + $1.chunks.count }
        var out = Writer(capacity: headerBytes + headJSON.count + 8 + objects.count * objectBytes)
        out.raw(magic)
        out.integer(UInt32(manifest.formatVersion))
        out.integer(UInt32(headJSON.count))
        out.integer(UInt32(objects.count))
        out.integer(UInt64(manifest.files.count))
        out.integer(UInt64(chunkCount))
        let strings = manifest.files.reduce(0) { $0 + $1.path.utf8.count }
        out.integer(UInt64(strings))
        out.integer(UInt64(0))
        out.raw(headJSON)
        out.pad()
        for object in objects { out.raw(object.bytes) }
        try fileTable(manifest, objects: objectIndex, bundles: bundleIndex, into: &out)
        for file in manifest.files {
            for chunk in file.chunks {
                out.raw(chunk.sha256.bytes)
                out.integer(chunk.offset)
                out.integer(chunk.objectOffset)
                out.integer(UInt32(clamping: chunk.length))
                out.integer(UInt32(clamping: chunk.objectLength))
                out.integer(chunk.object.flatMap { objectIndex[$0] } ?? ownObject)
                out.integer(UInt8(codecs.firstIndex(of: chunk.codec) ?? 0))
                out.raw([0, 0, 0])
            }
        }
        for file in manifest.files { out.raw(file.path.utf8) }
        return Data(out.bytes)
    }

    /// The file table of `manifest` (sorted by path, bytewise), appended to `out`.
    private static func fileTable(
        _ manifest: Manifest, objects objectIndex: [SHA256Digest: UInt32], bundles bundleIndex: [String: UInt16],
        into out: inout Writer
    ) throws(PatchSyncError) {
        var pathOffset: UInt64 = 0, firstChunk: UInt64 = 0, previous: String.UTF8View? = nil
        for file in manifest.files {
            let path = file.path.utf8
            guard previous.map({ $0.lexicographicallyPrecedes(path) }) ?? true else {
                throw PatchSyncError(
                    .internal, "the files of \(manifest.buildId) are not sorted by path at \(file.path)")
            }
            guard path.count <= Int(UInt16.max), let bundle = bundleIndex[file.bundle],
                let object = objectIndex[file.object]
            else {
                throw PatchSyncError(.internal, "\(file.path) of \(manifest.buildId) does not fit the binary manifest")
            }
            previous = path
            out.raw(file.sha256.bytes)
            out.integer(file.size)
            out.integer(firstChunk)
            out.integer(pathOffset)
            out.integer(UInt32(file.chunks.count))
            out.integer(object)
            out.integer(file.mode)
            out.integer(UInt16(path.count))
            out.integer(bundle)
            pathOffset += UInt64(path.count)
            firstChunk += UInt64(file.chunks.count)
        }
    }

    /// The manifest in `bytes`, its layout checked field by field (its meaning is checked by
    /// ``Manifest/validate()``).
    static func decode(_ bytes: UnsafeRawBufferPointer, what: String) throws(PatchSyncError) -> Manifest {
        var r = Reader(bytes, what: what)
        let header = try r.header()
        var manifest: Manifest
        do {
            manifest = try JSONDecoder().decode(Manifest.self, from: Data(try r.take(header.headLength, "head")))
        } catch {
            throw PatchSyncError(
                .refusedData, "\(what): the binary manifest's head is not a manifest's JSON", cause: error)
        }
        guard manifest.files.isEmpty, manifest.formatVersion == header.version else {
            throw r.refusal("the head lists files or names format \(manifest.formatVersion), not \(header.version)")
        }
        try r.padding()
        let objects = try r.objects(header.objectCount)
        let files = try r.take(header.fileCount * fileBytes, "file table")
        let chunks = try r.take(header.chunkCount * chunkBytes, "chunk table")
        let strings = try r.take(header.stringsLength, "string table")
        guard r.atEnd else { throw r.refusal("has \(bytes.count - r.position) bytes after its string table") }
        manifest.files = try Tables(
            files: files, chunks: chunks, strings: strings, objects: objects, bundles: manifest.bundles.count,
            what: what
        ).entries(bundleNames: manifest.bundles.map(\.name))
        return manifest
    }

    private struct Header {
        var version: Int, headLength: Int, objectCount: Int, fileCount: Int, chunkCount: Int, stringsLength: Int
    }

    /// The three tables of a binary manifest, read into file entries with every cross-reference checked.
    private struct Tables {
        let files: UnsafeRawBufferPointer, chunks: UnsafeRawBufferPointer, strings: UnsafeRawBufferPointer
        let objects: [SHA256Digest]
        let bundles: Int
        let what: String

        func entries(bundleNames: [String]) throws(PatchSyncError) -> [FileEntry] {
            let count = files.count / fileBytes
            var entries: [FileEntry] = []
            entries.reserveCapacity(count)
            var pathOffset = 0, nextChunk = 0, used = [Bool](repeating: false, count: objects.count)
            var previous: UnsafeRawBufferPointer? = nil
            for i in 0..<count {
                let record = UnsafeRawBufferPointer(rebasing: files[(i * fileBytes)..<((i + 1) * fileBytes)])
                func u64(_ at: Int) -> UInt64 {
                    UInt64(littleEndian: record.loadUnaligned(fromByteOffset: at, as: UInt64.self))
                }
                func u32(_ at: Int) -> UInt32 {
                    UInt32(littleEndian: record.loadUnaligned(fromByteOffset: at, as: UInt32.self))
                }
                func u16(_ at: Int) -> UInt16 {
                    UInt16(littleEndian: record.loadUnaligned(fromByteOffset: at, as: UInt16.self))
                }
                let pathLength = Int(u16(68)), chunkCount = Int(u32(56)), object = Int(u32(60)), bundle = Int(u16(70))
                guard u64(48) == UInt64(pathOffset), u64(40) == UInt64(nextChunk), pathLength > 0,
                    pathOffset + pathLength <= strings.count, object < objects.count, bundle < bundles,
                    chunkCount <= chunks.count / chunkBytes - nextChunk
                else { throw refusal("file \(i)'s path, chunks, object or bundle are out of place or bounds") }
                let pathBytes = UnsafeRawBufferPointer(rebasing: strings[pathOffset..<(pathOffset + pathLength)])
                guard previous.map({ $0.lexicographicallyPrecedes(pathBytes) }) ?? true else {
                    throw refusal("file \(i)'s path is not after the one before it: the path table is not sorted")
                }
                guard let path = String(validating: pathBytes, as: UTF8.self) else {
                    throw refusal("file \(i)'s path is not UTF-8")
                }
                used[object] = true
                let fileChunks = try self.chunks(from: nextChunk, count: chunkCount, used: &used, file: i)
                entries.append(
                    FileEntry(
                        path: path, size: Int64(bitPattern: u64(32)), mode: u32(64),
                        sha256: SHA256Digest(bytes: UnsafeRawBufferPointer(rebasing: record[0..<32])),
                        object: objects[object], bundle: bundleNames[bundle], chunks: fileChunks))
                previous = pathBytes
                pathOffset += pathLength
                nextChunk += chunkCount
            }
            guard pathOffset == strings.count, nextChunk * chunkBytes == chunks.count else {
                throw refusal("has string or chunk bytes no file names")
            }
            guard used.allSatisfy({ $0 }) else { throw refusal("lists an object no file or chunk names") }
            return entries
        }

        private func chunks(from first: Int, count: Int, used: inout [Bool], file: Int) throws(PatchSyncError)
            -> [ChunkEntry]
        {
            var out: [ChunkEntry] = []
            out.reserveCapacity(count)
            for c in first..<(first + count) {
                let record = UnsafeRawBufferPointer(rebasing: chunks[(c * chunkBytes)..<((c + 1) * chunkBytes)])
                func u64(_ at: Int) -> UInt64 {
                    UInt64(littleEndian: record.loadUnaligned(fromByteOffset: at, as: UInt64.self))
                }
                func u32(_ at: Int) -> UInt32 {
                    UInt32(littleEndian: record.loadUnaligned(fromByteOffset: at, as: UInt32.self))
                }
                let object = u32(56), codec = Int(record[60])
                guard codec < codecs.count, record[61] == 0, record[62] == 0, record[63] == 0,
                    object == ownObject || Int(object) < objects.count
                else { throw refusal("chunk \(c - first) of file \(file) names an unknown codec or object") }
                if object != ownObject { used[Int(object)] = true }
                out.append(
                    ChunkEntry(
                        offset: Int64(bitPattern: u64(32)), length: Int(u32(48)),
                        sha256: SHA256Digest(bytes: UnsafeRawBufferPointer(rebasing: record[0..<32])),
                        objectOffset: Int64(bitPattern: u64(40)), objectLength: Int(u32(52)), codec: codecs[codec],
                        object: object == ownObject ? nil : objects[Int(object)]))
            }
            return out
        }

        func refusal(_ problem: String) -> PatchSyncError { ManifestBinary.refusal(what, problem) }
    }

    static func refusal(_ what: String, _ problem: String) -> PatchSyncError {
        PatchSyncError(
            .refusedData, "\(what) is a binary manifest that \(problem)",
            remedy: "the build is malformed or tampered with; report it to the publisher")
    }

    private struct Reader {
        let buffer: UnsafeRawBufferPointer
        let what: String
        var position = 0

        init(_ buffer: UnsafeRawBufferPointer, what: String) {
            self.buffer = buffer
            self.what = what
        }

        var atEnd: Bool { position == buffer.count }

        func refusal(_ problem: String) -> PatchSyncError { ManifestBinary.refusal(what, problem) }

        mutating func take(_ count: Int, _ name: String) throws(PatchSyncError) -> UnsafeRawBufferPointer {
            guard count >= 0, count <= buffer.count - position else {
                throw refusal("ends inside its \(name) (\(buffer.count) bytes in all): it is truncated")
            }
            defer { position += count }
            return UnsafeRawBufferPointer(rebasing: buffer[position..<(position + count)])
        }

        mutating func header() throws(PatchSyncError) -> Header {
            let raw = try take(headerBytes, "header")
            func u64(_ at: Int) -> UInt64 {
                UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: at, as: UInt64.self))
            }
            func u32(_ at: Int) -> UInt32 {
                UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: at, as: UInt32.self))
            }
            guard ManifestBinary.isBinary(raw) else { throw refusal("does not start with PSMF") }
            let version = Int(u32(4))
            guard (8...Manifest.formatVersion).contains(version) else {
                throw PatchSyncError(
                    .refusedData,
                    "\(what) has manifest format version \(version); this client reads versions 1 to \(Manifest.formatVersion)",
                    remedy: "update PatchSync to install this build")
            }
            let limit = UInt64(buffer.count)
            guard u64(16) <= limit / UInt64(fileBytes), u64(24) <= limit / UInt64(chunkBytes), u64(32) <= limit,
                u64(40) == 0
            else { throw refusal("counts more files, chunks or path bytes than it holds") }
            return Header(
                version: version, headLength: Int(u32(8)), objectCount: Int(u32(12)), fileCount: Int(u64(16)),
                chunkCount: Int(u64(24)), stringsLength: Int(u64(32)))
        }

        mutating func padding() throws(PatchSyncError) {
            let pad = (8 - position % 8) % 8
            guard try take(pad, "padding").allSatisfy({ $0 == 0 }) else {
                throw refusal("has padding that is not zero")
            }
        }

        mutating func objects(_ count: Int) throws(PatchSyncError) -> [SHA256Digest] {
            let table = try take(count * objectBytes, "object table")
            var out: [SHA256Digest] = []
            out.reserveCapacity(count)
            for i in 0..<count {
                let object = SHA256Digest(bytes: UnsafeRawBufferPointer(rebasing: table[(i * 32)..<(i * 32 + 32)]))
                guard out.last.map({ $0 < object }) ?? true else {
                    throw refusal("lists object \(i) out of order or twice")
                }
                out.append(object)
            }
            return out
        }
    }

    private struct Writer {
        var bytes: [UInt8] = []

        init(capacity: Int) { bytes.reserveCapacity(capacity) }

        mutating func raw<C: Collection>(_ more: C) where C.Element == UInt8 { bytes.append(contentsOf: more) }
        mutating func integer<T: FixedWidthInteger>(_ value: T) {
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }
        mutating func pad() { bytes.append(contentsOf: repeatElement(0, count: (8 - bytes.count % 8) % 8)) }
    }
}
