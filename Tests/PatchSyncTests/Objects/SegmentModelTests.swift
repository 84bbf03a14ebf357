import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// How an object is cut into segment files, against any sequence of chunk sizes: a reference model
/// written apart from the writer (it keeps the segment files as lists of chunk lengths, and starts a
/// new one when a chunk does not fit) says where each chunk must go; ``ObjectNaming/place(after:stored:segmentBytes:)``
/// (what ``ObjectWriter`` writes by) must agree, and ``ObjectNaming/segment(of:)`` must find each chunk's
/// file. Small segments (4 KiB to 1 MiB) make fills to the byte and long objects common. A failure
/// prints its seed and the shortest prefix of the sequence that still fails.
@Suite("Segments of an object against random chunk sequences", .tags(.small))
struct SegmentModelTests {
    /// The reference: segment files as the lengths of the chunks in them.
    struct Model {
        let segmentBytes: Int64
        var files: [[Int64]] = []

        /// Appends a chunk; returns its offset in the object's offsets and whether it opened a file.
        mutating func add(_ stored: Int64) -> (offset: Int64, opens: Bool) {
            let used = files.last?.reduce(0, +) ?? segmentBytes  // no file yet: as if a full one
            if used + stored <= segmentBytes {
                files[files.count - 1].append(stored)
                return (Int64(files.count - 1) * segmentBytes + used, false)
            }
            files.append([stored])
            return (Int64(files.count - 1) * segmentBytes, files.count > 1)
        }
    }

    /// The first place where the writer's rule and the model differ, or nil.
    static func check(_ sizes: [Int64], segmentBytes: Int64) -> String? {
        var model = Model(segmentBytes: segmentBytes)
        var end: Int64 = 0
        for (index, stored) in sizes.enumerated() {
            let want = model.add(stored)
            let got = ObjectNaming.place(after: end, stored: stored, segmentBytes: segmentBytes)
            guard got == want else {
                return "chunk \(index) (\(stored) bytes): placed at \(got), the model says \(want)"
            }
            let first = got.offset / segmentBytes, last = (got.offset + stored - 1) / segmentBytes
            guard first == last, first == Int64(model.files.count - 1) else {
                return "chunk \(index) crosses segments \(first)–\(last) or is not in file \(model.files.count - 1)"
            }
            end = got.offset + stored
        }
        return model.files.allSatisfy { $0.reduce(0, +) <= segmentBytes } ? nil : "a segment file is over its size"
    }

    @Test(
        "every chunk of any sequence lands where the model of segment files puts it: never across two, a full segment followed by a new file, no file over the segment size"
    )
    func randomSequences() {
        let base: UInt64 = 20261126
        var checked = 0, exactFills = 0
        for index in 0..<2000 {
            let seed = base &+ UInt64(index)
            var random = SeededRandom(seed: seed)
            let segmentBytes = Int64(4096) << Int64.random(in: 0...8, using: &random)
            // Sizes that divide the segment (fills to the byte), near it, and anything in between.
            let sizes = (0..<Int.random(in: 1...60, using: &random)).map { _ -> Int64 in
                switch Int.random(in: 0..<4, using: &random) {
                case 0: return segmentBytes / Int64([1, 2, 4, 8].randomElement(using: &random)!)
                case 1: return segmentBytes - Int64.random(in: 0...16, using: &random)
                default: return Int64.random(in: 1...segmentBytes, using: &random)
                }
            }
            checked += 1
            var model = Model(segmentBytes: segmentBytes)
            for size in sizes { _ = model.add(size) }
            exactFills += model.files.dropLast().filter { $0.reduce(0, +) == segmentBytes }.count
            guard let failure = Self.check(sizes, segmentBytes: segmentBytes) else { continue }
            var shortest = sizes
            while shortest.count > 1, Self.check(Array(shortest.dropLast()), segmentBytes: segmentBytes) != nil {
                shortest.removeLast()
            }
            Issue.record(
                """
                segment model failed, seed \(seed) (segment \(segmentBytes) bytes): \(failure)
                shortest failing sequence of chunk sizes (\(shortest.count) of \(sizes.count)): \(shortest)
                """)
            return
        }
        #expect(checked == 2000 && exactFills > 100, "the sequences filled segments to the byte \(exactFills) times")
    }
}
