import Foundation
import Testing

@testable import PatchSync

/// The workers' inflater skips zlib's Adler-32 (a chunk's SHA-256 follows): these guard that it
/// still refuses every stream that is not exactly the chunk, and that one refusal does not spoil
/// the stream it reuses for the next chunk.
@Suite("Inflating chunks", .tags(.small))
struct ZlibTests {
    private let content: [UInt8] = (0..<100_000).map { UInt8(truncatingIfNeeded: $0 * 7 / 13) }

    private func inflate(_ stored: [UInt8], length: Int, with inflater: Zlib.Inflater = Zlib.Inflater()) -> [UInt8]? {
        var output = [UInt8](repeating: 0, count: length)
        let ok = stored.withUnsafeBytes { input in
            output.withUnsafeMutableBytes { inflater.inflate(input, into: $0) }
        }
        return ok ? output : nil
    }

    private var stored: [UInt8] { content.withUnsafeBytes { Zlib.deflate($0) } }

    @Test("a zlib stream inflates to exactly its content, many times on one inflater")
    func roundTrip() {
        let inflater = Zlib.Inflater()
        for _ in 0..<3 { #expect(inflate(stored, length: content.count, with: inflater) == content) }
    }

    @Test("a stream that inflates to fewer or more bytes than the chunk's length is refused")
    func wrongLength() {
        #expect(inflate(stored, length: content.count + 1) == nil)
        #expect(inflate(stored, length: content.count - 1) == nil)
    }

    @Test("a truncated stream, trailing bytes, a bad header or a preset dictionary are refused")
    func malformed() {
        let good = stored
        #expect(inflate(Array(good.dropLast(5)), length: content.count) == nil)
        #expect(inflate(good + [0], length: content.count) == nil)
        #expect(inflate(Array(good.prefix(5)), length: content.count) == nil)
        var header = good
        header[0] = 0x79  // compression method 9: not deflate
        #expect(inflate(header, length: content.count) == nil)
        var dictionary = good
        let flags = UInt32(good[1] & 0xc0 | 0x20)  // FDICT set, then the check bits made right again
        dictionary[1] = UInt8(flags + (31 - (UInt32(good[0]) << 8 | flags) % 31) % 31)
        #expect(inflate(dictionary, length: content.count) == nil)
    }

    @Test("after a refused stream the same inflater inflates the next chunk correctly")
    func reuseAfterRefusal() {
        let inflater = Zlib.Inflater()
        var damaged = stored
        damaged[damaged.count / 2] ^= 0xff
        _ = inflate(damaged, length: content.count, with: inflater)
        #expect(inflate(Array(stored.dropLast(5)), length: content.count, with: inflater) == nil)
        #expect(inflate(stored, length: content.count, with: inflater) == content)
    }

    @Test("a chunk whose stored bytes are damaged never verifies, even where the stream still inflates")
    func damagedChunkRefused() {
        let good = stored
        let entry = ChunkEntry(
            offset: 0, length: content.count, sha256: content.withUnsafeBytes { SHA256Hasher.hash($0) },
            objectOffset: 0, objectLength: good.count, codec: .zlib)
        let inflater = Zlib.Inflater()
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: content.count, alignment: 16)
        defer { scratch.deallocate() }
        let verified = good.withUnsafeBytes { entry.verifiedContent(of: $0, scratch: scratch, inflater: inflater) != nil }
        #expect(verified)
        for position in stride(from: 2, to: good.count, by: max(1, good.count / 40)) {
            var damaged = good
            damaged[position] ^= 0x01
            let result = damaged.withUnsafeBytes { entry.verifiedContent(of: $0, scratch: scratch, inflater: inflater) }
            // The trailer's Adler-32 is not read: a flip there leaves the content intact and verifiable.
            if position < good.count - 4 { #expect(result == nil, "a flip at \(position) verified") }
        }
    }
}
