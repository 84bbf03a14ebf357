import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Deltas: the encoder, the instruction reader and the pack", .tags(.small))
struct DeltaTests {
    /// Runs a delta's instructions against `source` in memory.
    static func apply(_ instructions: [UInt8], to source: [UInt8]) throws -> [UInt8] {
        try instructions.withUnsafeBytes { i in try source.withUnsafeBytes { s in try Delta.apply(i, to: s) } }
    }

    static func encode(_ source: [UInt8], _ target: [UInt8]) -> [UInt8] {
        source.withUnsafeBytes { s in target.withUnsafeBytes { t in DeltaEncoder(source: s).encode(target: t) } }
    }

    @Test("a delta rebuilds the target exactly and costs about the bytes that changed")
    func roundTrip() throws {
        var rng = SeededRandom(seed: 42)
        let source = rng.bytes(1 << 20)
        var target = source
        for at in [1000, 200_000, 500_000, 900_000] { target.replaceSubrange(at..<(at + 12), with: rng.bytes(12)) }
        target.insert(contentsOf: rng.bytes(100), at: 300_000)
        target.removeSubrange(700_000..<700_050)
        target += rng.bytes(40)
        let delta = Self.encode(source, target)
        #expect(try Self.apply(delta, to: source) == target)
        // 4×12 + 100 + 40 literal bytes, and a few bytes per copy.
        #expect(delta.count < 400, "the delta takes \(delta.count) bytes")
    }

    @Test("timestamps rewritten in place cost only their bytes (the predicted offset after a copy)")
    func substitutions() throws {
        var rng = SeededRandom(seed: 5)
        let source = rng.bytes(64 << 10)
        var target = source
        for at in stride(from: 100, to: 60_000, by: 3_000) { target[at] ^= 0x5a }
        let delta = Self.encode(source, target)
        #expect(try Self.apply(delta, to: source) == target)
        #expect(delta.count < 20 * 12, "20 one-byte changes took \(delta.count) bytes")
    }

    @Test(
        "unrelated, empty and tiny files still round-trip",
        arguments: [(0, 0), (0, 10), (10, 0), (15, 15), (3000, 5000)])
    func edges(sizes: (Int, Int)) throws {
        var rng = SeededRandom(seed: UInt64(sizes.0 * 7 + sizes.1))
        let source = rng.bytes(sizes.0), target = rng.bytes(sizes.1)
        #expect(try Self.apply(Self.encode(source, target), to: source) == target)
    }

    @Test("the reader refuses a copy outside the source, an add past the target and an unknown instruction")
    func readerBounds() {
        func instructions(_ build: (inout Delta.Writer) -> Void) -> [UInt8] {
            var writer = Delta.Writer(sourceSize: 100, targetSize: 50)
            build(&writer)
            return writer.bytes
        }
        let outside = instructions { $0.copy(from: 90, count: 20) }
        let pastTarget = instructions { w in [UInt8](repeating: 1, count: 60).withUnsafeBytes { w.add($0) } }
        let unknown: [UInt8] = [100, 50, 2, 0, 7, 1]  // sizes, 2 instruction bytes, no addresses: tag 7
        for bytes in [outside, pastTarget, unknown] {
            #expect(throws: DeltaError.self) { _ = try Self.apply(bytes, to: [UInt8](repeating: 0, count: 100)) }
        }
        let short = instructions { $0.copy(from: 0, count: 10) }
        short.withUnsafeBytes { raw in
            var reader = Delta.Reader(raw)!
            while (try? reader.next()) != nil {}
            #expect(!reader.isComplete, "10 of 50 bytes is not a complete target")
        }
    }

    @Test("a pack written segment by segment reads back entry by entry, and a truncated one is refused")
    func packRoundTrip() throws {
        let dir = NSTemporaryDirectory() + "patchsync-pack-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var rng = SeededRandom(seed: 9)
        let entries = [(3, rng.bytes(100)), (8, rng.bytes(DeltaPack.segmentBytes + 10)), (12, rng.bytes(5))]
        let output = try FileDescriptor(path: dir + "/pack", flags: O_WRONLY | O_CREAT, mode: 0o600)
        var writer = try DeltaPack.Writer(writingTo: output, codec: .default)
        for (index, bytes) in entries { try writer.append(file: index, instructions: bytes) }
        let sha = try writer.finish()
        #expect(try SHA256Hasher.hash(file: dir + "/pack") == sha)
        var read: [(Int, [UInt8])] = []
        try DeltaPack.read(try FileDescriptor(path: dir + "/pack", flags: O_RDONLY)) { index, bytes in
            read.append((index, Array(bytes)))
        }
        #expect(read.map(\.0) == entries.map(\.0) && read.map(\.1) == entries.map(\.1))

        try FileDescriptor(path: dir + "/pack", flags: O_WRONLY).truncate(to: writer.length - 3)
        #expect(throws: PatchSyncError.self) {
            try DeltaPack.read(try FileDescriptor(path: dir + "/pack", flags: O_RDONLY)) { _, _ in }
        }
    }
}
