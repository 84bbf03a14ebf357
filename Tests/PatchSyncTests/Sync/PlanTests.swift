import Foundation
import Testing

@testable import PatchSync

@Suite("Planning what to fetch", .tags(.small))
struct PlanTests {
    static func need(_ object: String, _ offset: Int64, _ length: Int, rank: Int = 0) -> Plan.Need {
        let sha = SHA256Digest.of(Data("\(object)\(offset)".utf8))
        let objectID = SHA256Digest.of(Data(object.utf8))
        return Plan.Need(
            chunk: ChunkEntry(
                offset: 0, length: length, sha256: sha, objectOffset: offset,
                objectLength: length, codec: .raw),
            object: objectID, destinations: [.init(path: object, index: 0, offset: 0)], rank: rank)
    }

    @Test("adjacent chunks of one object share a request; a gap or another object starts a new one")
    func coalescing() {
        var plan = Plan()
        plan.fetch = [Self.need("a", 0, 100), Self.need("a", 100, 50), Self.need("a", 400, 10), Self.need("b", 0, 10)]
        let requests = plan.requests(gap: 0, maxBytes: 1 << 20)
        #expect(requests.map(\.count).sorted() == [1, 1, 2])
        let merged = plan.requests(gap: 250, maxBytes: 1 << 20)
        #expect(merged.map(\.count).sorted() == [1, 3], "a gap up to the threshold is fetched rather than split")
    }

    @Test("a request never exceeds the size bound, and required bundles come first")
    func boundsAndOrder() {
        var plan = Plan()
        plan.fetch = (0..<10).map { Self.need("a", Int64($0) * 100, 100, rank: 5) } + [Self.need("z", 0, 10, rank: 0)]
        let requests = plan.requests(gap: 0, maxBytes: 300)
        #expect(requests.allSatisfy { $0.reduce(0) { $0 + $1.chunk.objectLength } <= 300 })
        #expect(requests.first?.first?.rank == 0)
        #expect(requests.flatMap { $0 }.count == 11)
    }

    @Test("a chunk shared by several files is fetched once and written to each place")
    func dedup() throws {
        let chunk = ChunkEntry(
            offset: 0, length: 4, sha256: SHA256Digest.of(Data("same".utf8)), objectOffset: 0,
            objectLength: 4, codec: .raw)
        let files = ["x", "y"].map {
            FileEntry(
                path: $0, size: 4, mode: 0o644, sha256: SHA256Digest.of(Data($0.utf8)),
                object: SHA256Digest.of(Data($0.utf8)), bundle: "base", chunks: [chunk])
        }
        let manifest = Manifest(
            formatVersion: 1, buildId: try BuildID("1"), channel: .live, sequence: 1,
            chunking: .standard, bundles: [.base], files: files)
        let plan = Plan(manifest: manifest, live: [:], liveChunks: [:], done: [])
        #expect(plan.fetch.count == 1)
        #expect(plan.fetch[0].destinations.map(\.path) == ["x", "y"])
        let resumed = Plan(manifest: manifest, live: [:], liveChunks: [:], done: [.init(path: "x", index: 0)])
        #expect(resumed.fetch[0].destinations.map(\.path) == ["y"], "a destination recorded done is not written again")
    }
}

@Suite("Verify workers and the inode lock", .tags(.small))
struct ChunkPipelinePickTests {
    @Test(
        "a worker takes the oldest chunk of a file no other worker is writing, so two never contend for one file's inode lock"
    )
    func otherFileFirst() {
        #expect(ChunkPipeline.pick(["a", "a", "b", "c"], avoiding: ["a"]) == 2)
        #expect(ChunkPipeline.pick(["b", "a"], avoiding: ["a"]) == 0)
        #expect(ChunkPipeline.pick(["a", "b", "c"], avoiding: ["a", "b"]) == 2, "with more workers, all their files")
    }

    @Test("with no other file queued, or no other worker busy, the oldest chunk goes first")
    func oldestOtherwise() {
        #expect(ChunkPipeline.pick(["a", "a"], avoiding: ["a"]) == 0)
        #expect(ChunkPipeline.pick(["a", "b"], avoiding: []) == 0)
        #expect(ChunkPipeline.pick([], avoiding: ["a"]) == 0)
    }
}
