import Foundation

/// A deployment's manifest kept ready to load: the manifest decoded once (when it arrived, validated),
/// written beside its signed JSON (`.patchsync/manifests/<deployment>.bin`) in a binary layout that
/// loads without a JSON parser. A patch, `verify` and a repair read it instead of decoding the JSON
/// again: on 200,000 files, about 2 s of JSON decoding each time.
///
/// Layout, little-endian: `PSMC`, a UInt32 version, the manifest format of the client that wrote it
/// (UInt32: another client's cache is not used, so a cache never outlives the validation of the
/// client that reads it), the SHA-256 of the signed manifest it was made from (32 bytes), the body's
/// length (UInt64) and SHA-256 (32 bytes), then the body: the manifest without its files as JSON
/// (UInt32 length, bytes); the bundle names (UInt32 count, each UInt32 length and bytes); the files (UInt64 count), each its path (UInt32 length, bytes), size (Int64),
/// mode (UInt32), SHA-256 and object (32 bytes each), bundle (UInt16 index), and its chunks (UInt32
/// count), each offset (Int64), length (UInt32), SHA-256, object offset (Int64), object length
/// (UInt32) and codec (UInt8: 0 raw, 1 zlib, 2 zstd; with 0x80 set, the chunk's own object follows,
/// 32 bytes: format 7).
///
/// Anything unexpected (another version, another manifest, a body that does not hash to its
/// recorded SHA-256, a field out of bounds) and the cache is not used: the signed JSON is read.
enum ManifestCache {
    static let magic: [UInt8] = Array("PSMC".utf8)
    static let version: UInt32 = 2

    /// Writes `manifest` (validated; its signed form hashes to `sha`) to `path`, atomically.
    static func write(_ manifest: Manifest, sha: String, to path: String) throws(PatchSyncError) {
        guard let target = SHA256Digest(hex: sha) else {
            throw PatchSyncError(.internal, "not a manifest hash: \(sha)")
        }
        var body = Writer()
        var head = manifest
        head.files = []
        let json: Data
        do { json = try JSONEncoder().encode(head) } catch {
            throw PatchSyncError(.internal, "encoding the manifest of \(manifest.buildId)", cause: error)
        }
        body.bytes(json, width: 4)
        var bundles: [String: UInt16] = [:]
        var names: [String] = []
        for file in manifest.files where bundles[file.bundle] == nil {
            bundles[file.bundle] = UInt16(names.count)
            names.append(file.bundle)
        }
        guard names.count < Int(UInt16.max) else { throw PatchSyncError(.internal, "too many bundles to cache") }
        body.integer(UInt32(names.count))
        for name in names { body.bytes(Data(name.utf8), width: 4) }
        body.integer(UInt64(manifest.files.count))
        for file in manifest.files {
            body.bytes(Data(file.path.utf8), width: 4)
            body.integer(file.size)
            body.integer(file.mode)
            body.digest(file.sha256)
            body.digest(file.object)
            guard let bundle = bundles[file.bundle] else {
                throw PatchSyncError(.internal, "bundle \(file.bundle) of \(file.path) is not in the cache's list")
            }
            body.integer(bundle)
            body.integer(UInt32(file.chunks.count))
            for chunk in file.chunks {
                body.integer(chunk.offset)
                body.integer(UInt32(chunk.length))
                body.digest(chunk.sha256)
                body.integer(chunk.objectOffset)
                body.integer(UInt32(chunk.objectLength))
                guard let codec = codecs.firstIndex(of: chunk.codec) else {
                    throw PatchSyncError(.internal, "codec \(chunk.codec) of \(file.path) is not in the cache's list")
                }
                body.integer(UInt8(codec) | (chunk.object == nil ? 0 : 0x80))
                if let object = chunk.object { body.digest(object) }
            }
        }
        var out = Writer()
        out.raw(magic)
        out.integer(version)
        out.integer(UInt32(Manifest.formatVersion))
        out.digest(target)
        out.integer(UInt64(body.data.count))
        out.digest(body.data.withUnsafeBytes { SHA256Hasher.hash($0) })
        out.raw(body.data)
        do { try FileSystem.writeAtomically(Data(out.data), to: path) } catch { throw PatchSyncError.wrap(error) }
    }

    /// The manifest cached at `path`, when it was made from the signed manifest `sha` by this version
    /// and its body is intact; else nil.
    static func read(_ path: String, sha: String) -> Manifest? {
        guard let target = SHA256Digest(hex: sha), let data = try? FileSystem.read(path, limit: 1 << 30) else {
            return nil
        }
        return data.withUnsafeBytes { raw -> Manifest? in
            var reader = Reader(raw)
            guard let (length, recorded) = header(&reader, target: target),
                let body = reader.raw(Int(clamping: length)), reader.atEnd, SHA256Hasher.hash(body) == recorded
            else { return nil }
            return decode(body)
        }
    }

    /// Bytes before a cache's body: magic, version, manifest format, signed manifest's hash, body length and hash.
    private static let headerBytes = 4 + 4 + 4 + 32 + 8 + 32

    /// Reads a cache's header: the body's length and recorded SHA-256, when the cache is of this version,
    /// of this client's manifest format and made from the signed manifest `target`; else nil.
    private static func header(_ reader: inout Reader, target: SHA256Digest) -> (UInt64, SHA256Digest)? {
        guard reader.raw(4).map(Array.init) == magic, reader.integer(UInt32.self) == version,
            reader.integer(UInt32.self) == UInt32(Manifest.formatVersion), reader.digest() == target,
            let length = reader.integer(UInt64.self), let recorded = reader.digest()
        else { return nil }
        return (length, recorded)
    }

    /// The manifest cached at `path` without its files (links, folders, bundles, deltas), read from the
    /// front of the cache while the whole body is hashed in bounded reads: what needs no per-file values
    /// (a verify's links and folders) costs no memory per file. nil as ``read(_:sha:)`` would be.
    static func readHead(_ path: String, sha: String) -> Manifest? {
        guard let target = SHA256Digest(hex: sha), let file = try? FileDescriptor(path: path, flags: O_RDONLY) else {
            return nil
        }
        var front = [UInt8](repeating: 0, count: headerBytes + 4)  // the header and the head's length
        guard (try? front.withUnsafeMutableBytes { try file.readFully(into: $0) }) == front.count else {
            return nil
        }
        return front.withUnsafeBytes { raw -> Manifest? in
            var reader = Reader(raw)
            guard let (length, recorded) = header(&reader, target: target),
                let jsonLength = reader.integer(UInt32.self), UInt64(jsonLength) + 4 <= length,
                jsonLength <= 64 << 20
            else { return nil }
            let hasher = SHA256Hasher()
            hasher.update(UnsafeRawBufferPointer(rebasing: raw[headerBytes...]))
            var json = [UInt8](repeating: 0, count: Int(jsonLength))
            guard (try? json.withUnsafeMutableBytes { try file.readFully(into: $0) }) == json.count else { return nil }
            json.withUnsafeBytes { hasher.update($0) }
            var seen = UInt64(4) + UInt64(jsonLength)
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
            defer { buffer.deallocate() }
            while seen <= length, let n = try? file.read(into: buffer), n > 0 {  // never past the stated end
                hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                seen += UInt64(n)
            }
            guard seen == length, hasher.finish() == recorded else { return nil }
            return try? JSONDecoder().decode(Manifest.self, from: Data(json))
        }
    }

    private static let codecs: [ChunkCodec] = [.raw, .zlib, .zstd]

    private static func decode(_ body: UnsafeRawBufferPointer) -> Manifest? {
        var r = Reader(body)
        guard let json = r.bytes(width: 4), var manifest = try? JSONDecoder().decode(Manifest.self, from: Data(json)),
            let bundleCount = r.integer(UInt32.self)
        else { return nil }
        var names: [String] = []
        for _ in 0..<bundleCount {
            guard let name = r.bytes(width: 4) else { return nil }
            names.append(String(decoding: name, as: UTF8.self))
        }
        guard let count = r.integer(UInt64.self), count <= UInt64(body.count / 80) else { return nil }
        var files: [FileEntry] = []
        files.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let path = r.bytes(width: 4), let size = r.integer(Int64.self), let mode = r.integer(UInt32.self),
                let sha = r.digest(), let object = r.digest(), let bundle = r.integer(UInt16.self),
                Int(bundle) < names.count,
                let chunkCount = r.integer(UInt32.self), Int(chunkCount) <= r.remaining / 57
            else { return nil }
            var chunks: [ChunkEntry] = []
            chunks.reserveCapacity(Int(chunkCount))
            for _ in 0..<chunkCount {
                guard let offset = r.integer(Int64.self), let length = r.integer(UInt32.self),
                    let chunkSha = r.digest(),
                    let objectOffset = r.integer(Int64.self), let objectLength = r.integer(UInt32.self),
                    let flags = r.integer(UInt8.self), Int(flags & 0x7f) < codecs.count
                else { return nil }
                var own: SHA256Digest? = nil
                if flags & 0x80 != 0 {
                    guard let object = r.digest() else { return nil }
                    own = object
                }
                chunks.append(
                    ChunkEntry(
                        offset: offset, length: Int(length), sha256: chunkSha, objectOffset: objectOffset,
                        objectLength: Int(objectLength), codec: codecs[Int(flags & 0x7f)], object: own))
            }
            files.append(
                FileEntry(
                    path: String(decoding: path, as: UTF8.self), size: size, mode: mode, sha256: sha, object: object,
                    bundle: names[Int(bundle)], chunks: chunks))
        }
        guard r.atEnd else { return nil }
        manifest.files = files
        return manifest
    }

    private struct Writer {
        var data: [UInt8] = []

        mutating func raw<C: Collection>(_ bytes: C) where C.Element == UInt8 { data.append(contentsOf: bytes) }
        mutating func integer<T: FixedWidthInteger>(_ value: T) {
            withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) }
        }
        mutating func digest(_ digest: SHA256Digest) { data.append(contentsOf: digest.bytes) }
        mutating func bytes(_ bytes: Data, width: Int) {
            if width == 2 { integer(UInt16(bytes.count)) } else { integer(UInt32(bytes.count)) }
            data.append(contentsOf: bytes)
        }
    }

    private struct Reader {
        let buffer: UnsafeRawBufferPointer
        var position = 0

        init(_ buffer: UnsafeRawBufferPointer) { self.buffer = buffer }

        var remaining: Int { buffer.count - position }
        var atEnd: Bool { position == buffer.count }

        mutating func raw(_ count: Int) -> UnsafeRawBufferPointer? {
            guard count >= 0, count <= remaining else { return nil }
            defer { position += count }
            return UnsafeRawBufferPointer(rebasing: buffer[position..<(position + count)])
        }

        mutating func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
            raw(MemoryLayout<T>.size).map { T(littleEndian: $0.loadUnaligned(as: T.self)) }
        }

        mutating func digest() -> SHA256Digest? { raw(32).map { SHA256Digest(bytes: $0) } }

        mutating func bytes(width: Int) -> UnsafeRawBufferPointer? {
            guard let count = width == 2 ? integer(UInt16.self).map(Int.init) : integer(UInt32.self).map(Int.init)
            else { return nil }
            return raw(count)
        }
    }
}
