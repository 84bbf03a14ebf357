import Foundation
import Testing

@testable import PatchSync

/// The workers' decompressor skips zlib's Adler-32 and zstd's checksum (a chunk's SHA-256 follows):
/// these guard that, for both codecs, it still refuses every stream that is not exactly the chunk,
/// that a chunk is read only as the codec its manifest records, and that one refusal does not spoil
/// the context it reuses for the next chunk.
@Suite("Decompressing chunks", .tags(.small))
struct ZlibTests {
    private let content: [UInt8] = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 * 7 / 13) }

    private func inflate(
        _ stored: [UInt8], length: Int, with decompressor: Decompressor = Decompressor(), as codec: ChunkCodec? = nil
    ) -> [UInt8]? {
        var output = [UInt8](repeating: 0, count: length)
        let ok = stored.withUnsafeBytes { input in
            output.withUnsafeMutableBytes { decompressor.decompress(input, into: $0, as: codec) }
        }
        return ok ? output : nil
    }

    private var stored: [UInt8] { content.withUnsafeBytes { Zlib.deflate($0) } }

    private func stored(_ codec: ObjectCodec.Kind) -> [UInt8] {
        content.withUnsafeBytes { ObjectCodec(kind: codec, level: 3).compress($0) }
    }

    @Test(
        "a stream inflates to exactly its content, many times on one decompressor", arguments: ObjectCodec.Kind.allCases
    )
    func roundTrip(codec: ObjectCodec.Kind) {
        let decompressor = Decompressor()
        for _ in 0..<3 { #expect(inflate(stored(codec), length: content.count, with: decompressor) == content) }
    }

    @Test(
        "the stored bytes say their codec (zstd's frame magic, a zlib header), and a chunk is read only as its recorded codec"
    )
    func codecDetected() {
        #expect(stored(.zstd).withUnsafeBytes { Decompressor.detect($0) } == .zstd)
        #expect(stored(.deflate).withUnsafeBytes { Decompressor.detect($0) } == .zlib)
        #expect(content.withUnsafeBytes { Decompressor.detect($0) } == nil)
        #expect(inflate(stored(.zstd), length: content.count, as: .zstd) == content)
        #expect(inflate(stored(.zstd), length: content.count, as: .zlib) == nil, "zstd bytes recorded as zlib")
        #expect(inflate(stored(.deflate), length: content.count, as: .zstd) == nil, "zlib bytes recorded as zstd")
    }

    @Test(
        "a stream that inflates to fewer or more bytes than the chunk's length is refused",
        arguments: ObjectCodec.Kind.allCases)
    func wrongLength(codec: ObjectCodec.Kind) {
        #expect(inflate(stored(codec), length: content.count + 1) == nil)
        #expect(inflate(stored(codec), length: content.count - 1) == nil)
    }

    @Test("a truncated stream, trailing bytes or a bad magic are refused", arguments: ObjectCodec.Kind.allCases)
    func truncatedOrTrailing(codec: ObjectCodec.Kind) {
        let good = stored(codec)
        #expect(inflate(Array(good.dropLast(5)), length: content.count) == nil)
        #expect(inflate(good + [0], length: content.count) == nil)
        #expect(inflate(good + good, length: content.count) == nil, "a second frame after the first")
        #expect(inflate(Array(good.prefix(5)), length: content.count) == nil)
        var magic = good
        magic[0] ^= 0x01
        #expect(inflate(magic, length: content.count) == nil)
    }

    @Test("a zlib stream with a bad header or a preset dictionary is refused")
    func malformed() {
        let good = stored
        var header = good
        header[0] = 0x79  // compression method 9: not deflate
        #expect(inflate(header, length: content.count) == nil)
        var dictionary = good
        let flags = UInt32(good[1] & 0xc0 | 0x20)  // FDICT set, then the check bits made right again
        dictionary[1] = UInt8(flags + (31 - (UInt32(good[0]) << 8 | flags) % 31) % 31)
        #expect(inflate(dictionary, length: content.count) == nil)
    }

    @Test(
        "after a refused stream the same decompressor inflates the next chunk correctly",
        arguments: ObjectCodec.Kind.allCases)
    func reuseAfterRefusal(codec: ObjectCodec.Kind) {
        let decompressor = Decompressor()
        var damaged = stored(codec)
        damaged[damaged.count / 2] ^= 0xff
        _ = inflate(damaged, length: content.count, with: decompressor)
        #expect(inflate(Array(stored(codec).dropLast(5)), length: content.count, with: decompressor) == nil)
        #expect(inflate(stored(codec), length: content.count, with: decompressor) == content)
    }

    @Test(
        "a chunk whose stored bytes are damaged never verifies, even where the stream still inflates",
        arguments: ObjectCodec.Kind.allCases)
    func damagedChunkRefused(codec: ObjectCodec.Kind) {
        let good = stored(codec)
        let entry = ChunkEntry(
            offset: 0, length: content.count, sha256: content.withUnsafeBytes { SHA256Hasher.hash($0) },
            objectOffset: 0, objectLength: good.count, codec: codec == .zstd ? .zstd : .zlib)
        let inflater = Decompressor()
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: content.count, alignment: 16)
        defer { scratch.deallocate() }
        let verified = good.withUnsafeBytes {
            entry.verifiedContent(of: $0, scratch: scratch, decompressor: inflater) != nil
        }
        #expect(verified)
        for position in stride(from: 2, to: good.count, by: max(1, good.count / 40)) {
            var damaged = good
            damaged[position] ^= 0x01
            let result = damaged.withUnsafeBytes {
                entry.verifiedContent(of: $0, scratch: scratch, decompressor: inflater)
            }
            // The trailer's Adler-32 is not read: a flip there leaves the content intact and verifiable.
            if codec == .zstd || position < good.count - 4 { #expect(result == nil, "a flip at \(position) verified") }
        }
    }
}
