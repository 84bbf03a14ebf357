import Foundation

/// The deltas from one source build to one target build, in one object: players with the source
/// build fetch it with one request, and the deltas compress together (the timestamps that a release
/// rewrote in thousands of files look alike).
///
/// Layout: `PSP1`, then segments, each a header of two little-endian UInt32 (stored length, inflated
/// length) and a zstd frame or a zlib stream of entries (each says which by its first bytes). An entry is `varint file` (its index in the target
/// manifest's `files`), `varint n` and n bytes of ``Delta`` instructions, or (manifest format 8) of one zstd
/// frame that decodes to the file with its source file as prefix (`zstd --patch-from`), as its first
/// bytes say. Segments hold about
/// ``segmentBytes`` each, so a reader needs one segment in memory at a time.
enum DeltaPack {
    static let magic: [UInt8] = Array("PSP1".utf8)
    static let segmentBytes = 4 << 20
    /// A delta with more instructions than this is not made: its file goes by chunks.
    static let maxDeltaBytes = 64 << 20
    /// The largest file whose delta may be a zstd frame with its source as prefix (manifest format 8): a
    /// client decodes such a frame whole, into a buffer of the file's size.
    static let maxZstdDeltaBytes: Int64 = 32 << 20
    /// The most a segment may inflate to: one entry of the largest size and its header.
    static let maxSegmentBytes = maxDeltaBytes + 32

    /// The codec of the delta packs of a build with `files`: zstd when its manifest holds zstd chunks
    /// (format 5, which every client that reads it can read zstd), else deflate, which a client of an
    /// older format reads too. Delta packs are small and fetched by every player of the source build:
    /// they get the strongest level that still writes a few MB/s (zstd 15, deflate 9).
    static func codec(for files: [FileEntry]) -> ObjectCodec {
        files.contains { $0.chunks.contains { $0.codec == .zstd } }
            ? ObjectCodec(kind: .zstd, level: 15) : ObjectCodec(kind: .deflate, level: 9)
    }

    /// Collects deltas and writes the pack, segment by segment, into a file.
    struct Writer {
        private let output: FileDescriptor
        private var pending: [UInt8] = []
        private(set) var files = 0
        private(set) var length: Int64 = 0
        private let hasher = SHA256Hasher()
        let codec: ObjectCodec

        /// Segments are compressed with `codec` (``DeltaPack/codec(for:)``).
        init(writingTo output: FileDescriptor, codec: ObjectCodec) throws(Errno) {
            self.output = output
            self.codec = codec
            try write(DeltaPack.magic)
        }

        mutating func append(file index: Int, instructions: [UInt8]) throws(Errno) {
            Varint.append(UInt64(index), to: &pending)
            Varint.append(UInt64(instructions.count), to: &pending)
            pending.append(contentsOf: instructions)
            files += 1
            if pending.count >= DeltaPack.segmentBytes { try flush() }
        }

        /// Writes what is pending; returns the pack's SHA-256.
        mutating func finish() throws(Errno) -> SHA256Digest {
            try flush()
            return hasher.finish()
        }

        private mutating func flush() throws(Errno) {
            guard !pending.isEmpty else { return }
            let packed = pending.withUnsafeBytes { codec.compress($0) }
            var header = [UInt8]()
            for value in [UInt32(packed.count), UInt32(pending.count)] {
                withUnsafeBytes(of: value.littleEndian) { header.append(contentsOf: $0) }
            }
            try write(header)
            try write(packed)
            pending = []
        }

        private mutating func write(_ bytes: [UInt8]) throws(Errno) {
            try output.write(bytes)
            bytes.withUnsafeBytes { hasher.update($0) }
            length += Int64(bytes.count)
        }
    }

    /// Reads a pack that has been verified against its signed hash, one segment at a time, and hands
    /// each entry (file index, instructions) to `body`. Throws when the pack is malformed.
    static func read(
        _ input: FileDescriptor,
        body: (Int, UnsafeRawBufferPointer) throws(PatchSyncError) -> Void
    ) throws(PatchSyncError) {
        func refuse(_ why: String) -> PatchSyncError {
            PatchSyncError(
                .refusedData, "delta pack \(input.path): \(why)",
                remedy: "the publisher's delta pack is malformed; the files are fetched as chunks")
        }
        var offset: Int64 = 0
        let decompressor = Decompressor()
        func readExactly(_ count: Int) throws(PatchSyncError) -> [UInt8]? {
            var bytes = [UInt8](repeating: 0, count: count)
            let read = bytes.withUnsafeMutableBytes { raw in
                Result { () throws(Errno) in try input.readFully(into: raw) }
            }
            let n: Int
            do { n = try read.get() } catch { throw PatchSyncError.wrap(error) }
            offset += Int64(n)
            if n == 0 { return nil }
            guard n == count else { throw refuse("ends inside a segment at byte \(offset)") }
            return bytes
        }
        guard try readExactly(magic.count) == magic else { throw refuse("does not start with PSP1") }
        while let header = try readExactly(8) {
            let stored = header.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self))) }
            let size = header.withUnsafeBytes {
                Int(UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: 4, as: UInt32.self)))
            }
            guard size > 0, size <= maxSegmentBytes, stored <= maxSegmentBytes + 1024 else {
                throw refuse("a segment at byte \(offset) declares \(size) bytes")
            }
            guard let packed = try readExactly(stored) else { throw refuse("a segment's stream is missing") }
            var inflated = [UInt8](repeating: 0, count: size)
            let ok = packed.withUnsafeBytes { src in
                inflated.withUnsafeMutableBytes { decompressor.decompress(src, into: $0) }
            }
            guard ok else { throw refuse("a segment at byte \(offset) does not inflate to its declared size") }
            let failure = inflated.withUnsafeBytes { raw -> PatchSyncError? in
                var position = 0
                while position < raw.count {
                    guard let file = Varint.read(raw, at: &position), let n = Varint.read(raw, at: &position),
                        file < UInt64(Int.max), n <= UInt64(raw.count - position)
                    else {
                        return refuse("an entry runs past its segment")
                    }
                    do throws(PatchSyncError) {
                        try body(Int(file), UnsafeRawBufferPointer(rebasing: raw[position..<(position + Int(n))]))
                    } catch { return error }
                    position += Int(n)
                }
                return nil
            }
            if let failure { throw failure }
        }
    }
}
