import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Content-defined chunking", .tags(.small))
struct ChunkerTests {
    /// Small sizes keep these tests fast; the algorithm is the same at the default sizes.
    static let params = ChunkingParameters(minSize: 2048, averageSize: 8192, maxSize: 32768)

    func cuts(_ data: [UInt8], _ parameters: ChunkingParameters = params) throws -> [Int] {
        let chunker = try Chunker(parameters)
        var lengths: [Int] = []
        data.withUnsafeBytes { raw in
            var start = 0
            while start < raw.count {
                let n = chunker.cutPoint(UnsafeRawBufferPointer(rebasing: raw[start...]))
                lengths.append(n)
                start += n
            }
        }
        return lengths
    }

    func chunkHashes(_ data: [UInt8]) throws -> [SHA256Digest] {
        var hashes: [SHA256Digest] = []
        var offset = 0
        for n in try cuts(data) {
            hashes.append(data[offset..<(offset + n)].withUnsafeBytes { SHA256Hasher.hash($0) })
            offset += n
        }
        return hashes
    }

    @Test("the same bytes always give the same cut points")
    func deterministic() throws {
        var rng = SeededRandom(seed: 1)
        let data = rng.bytes(1 << 20)
        #expect(try cuts(data) == cuts(data))
        #expect(try cuts(data).reduce(0, +) == data.count)
        #expect(try cuts(data).count > 20)
    }

    @Test("no chunk is shorter than the minimum (but the last) or longer than the maximum")
    func bounds() throws {
        var rng = SeededRandom(seed: 2)
        let random = rng.bytes(2 << 20)
        let zeros = [UInt8](repeating: 0, count: 200_000)  // no content cut: the maximum forces cuts
        for data in [random, zeros] {
            let lengths = try cuts(data)
            #expect(lengths.dropLast().allSatisfy { $0 >= Self.params.minSize && $0 <= Self.params.maxSize })
            #expect(lengths.last! <= Self.params.maxSize)
        }
        #expect(try cuts(zeros).dropLast().allSatisfy { $0 == Self.params.maxSize })
    }

    @Test("normalised chunking keeps the mean near the average size")
    func average() throws {
        var rng = SeededRandom(seed: 3)
        let lengths = try cuts(rng.bytes(8 << 20))
        let mean = Double(lengths.reduce(0, +)) / Double(lengths.count)
        #expect(mean > Double(Self.params.averageSize) * 0.6 && mean < Double(Self.params.averageSize) * 1.6)
    }

    @Test("one byte inserted or deleted changes only the chunks around it", arguments: [1, -1, 300, -300])
    func stableUnderEdits(delta: Int) throws {
        var rng = SeededRandom(seed: 4)
        let original = rng.bytes(4 << 20)
        var edited = original
        let at = original.count / 2
        if delta > 0 {
            edited.insert(contentsOf: rng.bytes(delta), at: at)
        } else {
            edited.removeSubrange(at..<(at - delta))
        }
        let before = try chunkHashes(original), after = try chunkHashes(edited)
        let changed = Set(after).subtracting(before).count
        #expect(before.count > 200)
        #expect(changed >= 1 && changed <= 3, "an edit in the middle should change 1–3 chunks, changed \(changed)")
    }

    @Test("the streaming chunker cuts exactly where the in-memory one does, across buffer refills")
    func streamingMatches() throws {
        var rng = SeededRandom(seed: 5)
        let data = rng.bytes(9 << 20 + 123)
        let path = NSTemporaryDirectory() + "chunker-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data(data).write(to: URL(fileURLWithPath: path))
        let chunker = try Chunker(ChunkingParameters.standard)
        var streamed: [Int] = []
        try chunker.forEachChunk(of: try FileDescriptor(path: path, flags: O_RDONLY)) { bytes, _ in
            streamed.append(bytes.count)
        }
        #expect(streamed == (try cuts(data, .standard)))
    }

    @Test("unusable chunk sizes are refused", arguments: [(100, 8192, 4096), (2048, 3000, 32768), (4096, 4096, 8192)])
    func refusesBadParameters(sizes: (Int, Int, Int)) {
        #expect(throws: PatchSyncError.self) {
            try Chunker(ChunkingParameters(minSize: sizes.0, averageSize: sizes.1, maxSize: sizes.2))
        }
    }
}
