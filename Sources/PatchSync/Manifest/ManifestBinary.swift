import Foundation

/// The binary manifest (format 8): what a build's target holds, zstd-compressed on the wire.
///
/// Files and chunks are fixed-width records at 8-byte aligned offsets, so a reader can look a file or a
/// chunk up where the bytes lie (a binary search of the sorted file table) without building a value per
/// file. No record holds an offset into another table or an index that a file added elsewhere would
/// shift: a file's path and chunks follow the previous file's, and a chunk stored in another object
/// than its file's takes the next entry of the chunk-object table. So a build that changes a few files
/// changes a few records, and a manifest delta stays the size of the change. All integers are
/// little-endian. Its reference reader, written apart from this code, is `manifests/manifest_reader.py`;
/// `patchsync manifest show --decoded` prints the JSON view that `manifests/manifest.schema.json`
/// documents.
///
///     header, 48 bytes
///       0  "PSMF"                     magic
///       4  u32 format version         8
///       8  u32 head length            bytes of the head's JSON
///      12  u32 reserved, 0
///      16  u64 file count
///      24  u64 chunk count
///      32  u64 chunk-object count
///      40  u64 string table length
///     head          the manifest without its files as sorted-key JSON (`files` is []), zero-padded to 8
///     files         file count × 88, by path ascending (bytewise UTF-8), each path once:
///       0  sha256 (32) · 32 object (32: its SHA-256) · 64 i64 size · 72 u32 chunk count · 76 u32 mode ·
///      80 u16 path length · 82 u16 bundle (index into the head's `bundles`) · 84 u32 reserved, 0
///     chunks        chunk count × 64, file after file:
///       0  sha256 (32) · 32 i64 offset in the file · 40 i64 offset in the object · 48 u32 length ·
///      52 u32 stored length · 56 u8 codec (0 raw, 1 zlib, 2 zstd) · 57 u8 flags (1: its object is the
///         next entry of the chunk-object table, else its file's; 2: the file is this one chunk, whose
///         SHA-256 is the file's and left zero here, so that it compresses; set whenever that is so) ·
///      58 six zero bytes
///     chunk objects chunk-object count × 32: the SHA-256 of each flagged chunk's object, in chunk order
///     strings       the paths' UTF-8, file after file, with nothing between or after them
///
/// Each manifest has one encoding: the head is the encoder's JSON byte for byte, and flag 2 is set
/// wherever it can be. The layout leaves no byte unaccounted for: the sections follow one another to the end, the files'
/// chunk counts add up to the chunk table, the flagged chunks to the chunk-object table, the path
/// lengths to the string table. Anything else is refused, naming the field.
enum ManifestBinary {
    static let magic: [UInt8] = Array("PSMF".utf8)
    static let headerBytes = 48, fileBytes = 88, chunkBytes = 64, objectBytes = 32
    static let codecs: [ChunkCodec] = [.raw, .zlib, .zstd]
    private static let zeroDigest = [UInt8](repeating: 0, count: 32)

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
        let chunkCount = manifest.files.reduce(0) { $0 + $1.chunks.count }
        let chunkObjects = manifest.files.reduce(0) { $0 + $1.chunks.count { $0.object != nil } }
        let strings = manifest.files.reduce(0) { $0 + $1.path.utf8.count }
        var out = Writer(
            capacity: headerBytes + headJSON.count + 8 + manifest.files.count * fileBytes + chunkCount * chunkBytes
                + chunkObjects * objectBytes + strings)
        out.raw(magic)
        out.integer(UInt32(manifest.formatVersion))
        out.integer(UInt32(headJSON.count))
        out.integer(UInt32(0))
        out.integer(UInt64(manifest.files.count))
        out.integer(UInt64(chunkCount))
        out.integer(UInt64(chunkObjects))
        out.integer(UInt64(strings))
        out.raw(headJSON)
        out.pad()
        try fileTable(manifest, into: &out)
        for file in manifest.files {
            let whole = file.chunks.count == 1 && file.chunks[0].sha256 == file.sha256
            for chunk in file.chunks {
                out.raw(whole ? zeroDigest : chunk.sha256.bytes)
                out.integer(chunk.offset)
                out.integer(chunk.objectOffset)
                out.integer(UInt32(clamping: chunk.length))
                out.integer(UInt32(clamping: chunk.objectLength))
                out.integer(UInt8(codecs.firstIndex(of: chunk.codec) ?? 0))
                out.integer(UInt8(chunk.object == nil ? 0 : 1) | (whole ? 2 : 0))
                out.raw(repeatElement(0, count: 6))
            }
        }
        for file in manifest.files {
            for chunk in file.chunks { if let object = chunk.object { out.raw(object.bytes) } }
        }
        for file in manifest.files { out.raw(file.path.utf8) }
        return Data(out.bytes)
    }

    /// The file table of `manifest` (sorted by path, bytewise), appended to `out`.
    private static func fileTable(_ manifest: Manifest, into out: inout Writer) throws(PatchSyncError) {
        let bundleIndex = Dictionary(
            manifest.bundles.enumerated().map { ($1.name, UInt16($0)) }, uniquingKeysWith: { a, _ in a })
        var previous: String.UTF8View? = nil
        for file in manifest.files {
            let path = file.path.utf8
            guard previous.map({ $0.lexicographicallyPrecedes(path) }) ?? true else {
                throw PatchSyncError(
                    .internal, "the files of \(manifest.buildId) are not sorted by path at \(file.path)")
            }
            guard path.count <= Int(UInt16.max), let bundle = bundleIndex[file.bundle] else {
                throw PatchSyncError(.internal, "\(file.path) of \(manifest.buildId) does not fit the binary manifest")
            }
            previous = path
            out.raw(file.sha256.bytes)
            out.raw(file.object.bytes)
            out.integer(file.size)
            out.integer(UInt32(file.chunks.count))
            out.integer(file.mode)
            out.integer(UInt16(path.count))
            out.integer(bundle)
            out.integer(UInt32(0))
        }
    }

    /// The manifest in `bytes`, its layout checked field by field (its meaning is checked by
    /// ``Manifest/validate()``).
    static func decode(_ bytes: UnsafeRawBufferPointer, what: String) throws(PatchSyncError) -> Manifest {
        var r = Reader(bytes, what: what)
        let header = try r.header()
        var manifest: Manifest
        let head = Data(try r.take(header.headLength, "head"))
        do { manifest = try JSONDecoder().decode(Manifest.self, from: head) } catch {
            throw PatchSyncError(
                .refusedData, "\(what): the binary manifest's head is not a manifest's JSON", cause: error)
        }
        guard manifest.files.isEmpty, manifest.formatVersion == header.version else {
            throw r.refusal(
                "has a head that lists files or names format \(manifest.formatVersion), not \(header.version)")
        }
        // One encoding per manifest: the head as the encoder writes it (else a delta against it would not apply).
        guard (try? TUFCoding.encoder.encode(manifest)) == head else {
            throw r.refusal("has a head that is not in its one encoding (sorted keys, no spaces, no unknown keys)")
        }
        try r.padding()
        let tables = Tables(
            files: try r.take(header.fileCount * fileBytes, "file table"),
            chunks: try r.take(header.chunkCount * chunkBytes, "chunk table"),
            chunkObjects: try r.take(header.chunkObjectCount * objectBytes, "chunk-object table"),
            strings: try r.take(header.stringsLength, "string table"), what: what)
        guard r.atEnd else { throw r.refusal("has \(bytes.count - r.position) bytes after its string table") }
        manifest.files = try tables.entries(bundleNames: manifest.bundles.map(\.name))
        return manifest
    }

    private struct Header {
        var version: Int, headLength: Int, fileCount: Int, chunkCount: Int, chunkObjectCount: Int, stringsLength: Int
    }

    /// The tables of a binary manifest, read into file entries with every count and order checked.
    private struct Tables {
        let files: UnsafeRawBufferPointer, chunks: UnsafeRawBufferPointer
        let chunkObjects: UnsafeRawBufferPointer, strings: UnsafeRawBufferPointer
        let what: String

        /// Where the reading has got to in the chunk, chunk-object and string tables.
        struct Cursor { var chunk = 0, chunkObject = 0, path = 0 }

        func entries(bundleNames: [String]) throws(PatchSyncError) -> [FileEntry] {
            let count = files.count / fileBytes
            var entries: [FileEntry] = []
            entries.reserveCapacity(count)
            var at = Cursor(), previous: UnsafeRawBufferPointer? = nil
            for i in 0..<count {
                let record = UnsafeRawBufferPointer(rebasing: files[(i * fileBytes)..<((i + 1) * fileBytes)])
                let pathLength = Int(record.u16(80)), chunkCount = Int(record.u32(72)), bundle = Int(record.u16(82))
                guard pathLength > 0, pathLength <= strings.count - at.path, bundle < bundleNames.count,
                    chunkCount <= chunks.count / chunkBytes - at.chunk, record.u32(84) == 0
                else { throw refusal("has file \(i) with its path, chunks or bundle out of bounds") }
                let pathBytes = UnsafeRawBufferPointer(rebasing: strings[at.path..<(at.path + pathLength)])
                guard previous.map({ $0.lexicographicallyPrecedes(pathBytes) }) ?? true else {
                    throw refusal("has file \(i)'s path not after the one before it: the file table is not sorted")
                }
                guard let path = String(validating: pathBytes, as: UTF8.self) else {
                    throw refusal("has file \(i)'s path not in UTF-8")
                }
                let fileChunks = try self.chunks(count: chunkCount, at: &at, file: i, sha256: record.digest(0))
                entries.append(
                    FileEntry(
                        path: path, size: Int64(bitPattern: record.u64(64)), mode: record.u32(76),
                        sha256: record.digest(0), object: record.digest(32), bundle: bundleNames[bundle],
                        chunks: fileChunks))
                previous = pathBytes
                at.path += pathLength
            }
            guard at.path == strings.count, at.chunk * chunkBytes == chunks.count,
                at.chunkObject * objectBytes == chunkObjects.count
            else { throw refusal("has path, chunk or chunk-object bytes that no file names") }
            return entries
        }

        private func chunks(count: Int, at: inout Cursor, file: Int, sha256: SHA256Digest) throws(PatchSyncError)
            -> [ChunkEntry]
        {
            var out: [ChunkEntry] = []
            out.reserveCapacity(count)
            for c in 0..<count {
                let index = at.chunk + c
                let record = UnsafeRawBufferPointer(rebasing: chunks[(index * chunkBytes)..<((index + 1) * chunkBytes)])
                let codec = Int(record[56]), flags = record[57]
                let whole = flags & 2 != 0
                guard codec < codecs.count, flags <= 3, record[58..<64].allSatisfy({ $0 == 0 }),
                    whole
                        ? count == 1 && record[0..<32].allSatisfy({ $0 == 0 })
                        : count != 1 || record.digest(0) != sha256
                else {
                    throw refusal("has chunk \(c) of file \(file) with an unknown codec or flags")
                }
                var object: SHA256Digest? = nil
                if flags & 1 != 0 {
                    guard at.chunkObject < chunkObjects.count / objectBytes else {
                        throw refusal("has more chunks in other objects than its chunk-object table lists")
                    }
                    let entry = at.chunkObject * objectBytes
                    object = SHA256Digest(bytes: UnsafeRawBufferPointer(rebasing: chunkObjects[entry..<(entry + 32)]))
                    at.chunkObject += 1
                }
                out.append(
                    ChunkEntry(
                        offset: Int64(bitPattern: record.u64(32)), length: Int(record.u32(48)),
                        sha256: whole ? sha256 : record.digest(0),
                        objectOffset: Int64(bitPattern: record.u64(40)), objectLength: Int(record.u32(52)),
                        codec: codecs[codec], object: object))
            }
            at.chunk += count
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
            guard ManifestBinary.isBinary(raw) else { throw refusal("does not start with PSMF") }
            let version = Int(raw.u32(4))
            guard (8...Manifest.formatVersion).contains(version) else {
                throw PatchSyncError(
                    .refusedData,
                    "\(what) has manifest format version \(version); this client reads versions 1 to \(Manifest.formatVersion)",
                    remedy: "update PatchSync to install this build")
            }
            let limit = UInt64(buffer.count)
            guard raw.u32(12) == 0, raw.u64(16) <= limit / UInt64(fileBytes), raw.u64(24) <= limit / UInt64(chunkBytes),
                raw.u64(32) <= limit / UInt64(objectBytes), raw.u64(40) <= limit
            else { throw refusal("counts more files, chunks, objects or path bytes than it holds") }
            return Header(
                version: version, headLength: Int(raw.u32(8)), fileCount: Int(raw.u64(16)),
                chunkCount: Int(raw.u64(24)), chunkObjectCount: Int(raw.u64(32)), stringsLength: Int(raw.u64(40)))
        }

        mutating func padding() throws(PatchSyncError) {
            let pad = (8 - position % 8) % 8
            guard try take(pad, "padding").allSatisfy({ $0 == 0 }) else {
                throw refusal("has padding that is not zero")
            }
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

extension UnsafeRawBufferPointer {
    fileprivate func u64(_ at: Int) -> UInt64 {
        UInt64(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt64.self))
    }
    fileprivate func u32(_ at: Int) -> UInt32 {
        UInt32(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt32.self))
    }
    fileprivate func u16(_ at: Int) -> UInt16 {
        UInt16(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt16.self))
    }
    fileprivate func digest(_ at: Int) -> SHA256Digest {
        SHA256Digest(bytes: UnsafeRawBufferPointer(rebasing: self[at..<(at + 32)]))
    }
}
