import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// A publish stores only the chunks no kept build has (manifest format 7): a changed file's other chunks
/// stay in the objects earlier builds wrote, until they would scatter it over too many ranges.
@Suite("Chunks are stored once", .tags(.medium))
struct ChunkStoreTests {
    /// `folder` with ObjectNameTests' 8 MiB pak, `patches` (offset, byte) each rewriting 64 KiB there.
    static func writeBuild(_ folder: String, patches: [(Int, UInt8)] = [], readme: String? = nil) throws {
        try ObjectNameTests.writeBuild(folder, extra: readme)
        let path = folder + "/level.pak"
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        for (offset, byte) in patches {
            var random = SeededRandom(seed: UInt64(offset) &+ UInt64(byte))
            for i in offset..<(offset + (64 << 10)) { bytes[i] = byte ^ UInt8.random(in: 0...255, using: &random) }
        }
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }

    /// A fixture and two builds: the pak changed in two places between them, and a changed readme.
    static func twoChangedBuilds() throws -> (Fixture, String, String) {
        let fixture = try Fixture()
        let one = fixture.directory + "/one", two = fixture.directory + "/two"
        try Self.writeBuild(one, readme: "first\n")
        try Self.writeBuild(two, patches: [(1 << 20, 1), (6 << 20, 2)], readme: "second\n")
        return (fixture, one, two)
    }

    /// Up to 2 + 5 ranges for the 8 MiB pak (about 5 MiB stored).
    static let lenient = Fragmentation(bytesPerRange: 1 << 20)

    static func pak(_ fixture: Fixture, _ id: String) throws -> FileEntry {
        try #require(try ObjectNameTests.manifest(fixture, id).files.first { $0.path == "level.pak" })
    }

    static func installed(_ fixture: Fixture, _ name: String) async throws -> Data {
        let install = try fixture.makeInstall(name, remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        return try Data(contentsOf: URL(fileURLWithPath: install.root + "/current/level.pak"))
    }

    @Test(
        "a file changed in two places stores only the chunks around them, in the publish's pack: the rest stay in the first build's object, which prune keeps once that build is unlisted and gone; fresh installs before and after are byte-exact"
    )
    func changedFileStoresNewChunksOnly() async throws {
        let (fixture, one, two) = try Self.twoChangedBuilds()
        try fixture.publish(one, id: "1", fragmentation: Self.lenient)
        let first = try Self.pak(fixture, "1")
        let report = try fixture.publish(two, id: "2", fragmentation: Self.lenient)
        let second = try Self.pak(fixture, "2")

        let stored = first.chunks.reduce(Int64(0)) { $0 + Int64($1.objectLength) }
        #expect(
            report.objectBytesWritten * 2 < stored,
            "only the chunks around the changes are written: \(report.objectBytesWritten) of \(stored)")
        #expect(
            report.reusedChunks > 0 && report.reusedChunkBytes + report.objectBytesWritten >= stored,
            "\(report.reusedChunks) chunks (\(report.reusedChunkBytes) B) left in place")
        #expect(report.consolidatedFiles.isEmpty)
        #expect(second.objects.contains(first.object) && second.object != first.object && !second.isWhole)
        #expect(Fragmentation.ranges(second.chunks) <= 5, "two changes split one range into at most five")
        let readme = try #require(try ObjectNameTests.manifest(fixture, "2").files.first { $0.path == "readme.txt" })
        #expect(second.object == readme.object, "the pak's new chunks share the publish's pack with the small files")
        let expected = try Data(contentsOf: URL(fileURLWithPath: two + "/level.pak"))
        #expect(try await Self.installed(fixture, "fresh") == expected)
        #expect(
            try fixture.publish(two, id: "2", fragmentation: Self.lenient).alreadyPublished,
            "the same publish again is a no-op: the chunks stay where the manifest says")

        let pruned = try Pruner(
            origin: fixture.origin,
            options: {
                var o = Pruner.Options(keep: 1)
                o.grace = 0
                return o
            }(), signers: fixture.signers
        ).run()
        #expect(pruned.unlisted == ["live/1"])
        #expect(
            FileManager.default.fileExists(atPath: OriginLayout(root: fixture.origin).objectFile(first.object)),
            "build 1's object holds chunks build 2 names: kept")
        #expect(try await Self.installed(fixture, "after-prune") == expected)
    }

    @Test(
        "a changed file whose new chunks pass --small-file spills, in the same pass, into an object of its own that holds only them; the rest stay in place and a fresh install is byte-exact"
    )
    func manyNewChunksSpillToAnObject() async throws {
        let (fixture, one, two) = try Self.twoChangedBuilds()
        try fixture.publish(one, id: "1", smallFileBytes: 512 << 10, fragmentation: Self.lenient)
        let first = try Self.pak(fixture, "1")
        let report = try fixture.publish(two, id: "2", smallFileBytes: 512 << 10, fragmentation: Self.lenient)
        let second = try Self.pak(fixture, "2")
        let readme = try #require(try ObjectNameTests.manifest(fixture, "2").files.first { $0.path == "readme.txt" })
        #expect(second.object != readme.object && second.object != first.object, "an object of its own")
        #expect(second.objects.contains(first.object) && !second.isWhole && report.reusedChunks > 0)
        let own = second.chunks.filter { $0.object == nil }.reduce(Int64(0)) { $0 + Int64($1.objectLength) }
        #expect(own > 512 << 10 && own * 2 < first.chunks.reduce(Int64(0)) { $0 + Int64($1.objectLength) })
        let expected = try Data(contentsOf: URL(fileURLWithPath: two + "/level.pak"))
        #expect(try await Self.installed(fixture, "fresh") == expected)
    }

    /// Two builds whose pak changes in four places, published under a bound of 2 ranges (so the second
    /// is stored whole again), new files up to `smallFileBytes` going into packs.
    static func scatteredPair(smallFileBytes: Int) throws -> (Fixture, String, String, Publisher.Report) {
        let patches = [(1 << 20, UInt8(1)), (3 << 20, 2), (5 << 20, 3), (7 << 20, 4)]
        let strict = Fragmentation(bytesPerRange: 1 << 30, baseRanges: 2)
        let fixture = try Fixture()
        let one = fixture.directory + "/one", two = fixture.directory + "/two"
        try Self.writeBuild(one)
        try Self.writeBuild(two, patches: patches)
        try fixture.publish(one, id: "1", smallFileBytes: smallFileBytes, fragmentation: strict)
        let report = try fixture.publish(two, id: "2", smallFileBytes: smallFileBytes, fragmentation: strict)
        return (fixture, one, two, report)
    }

    @Test(
        "a change that would scatter a file over more ranges than the bound stores it whole again (reported), and an install of it is byte-exact; under the bound the same change keeps the chunks in place"
    )
    func scatteredFileIsConsolidated() async throws {
        let (fixture, one, two, report) = try Self.scatteredPair(smallFileBytes: PackWriter.defaultSmallFile)
        let entry = try Self.pak(fixture, "2")
        #expect(report.consolidatedFiles == ["level.pak"])
        #expect(report.reusedChunks == 0 && entry.isWhole && Fragmentation.ranges(entry.chunks) == 1)
        #expect(report.objectBytesWritten > 4 << 20, "stored whole: \(report.objectBytesWritten)")
        #expect(
            try await Self.installed(fixture, "fresh")
                == (try Data(contentsOf: URL(fileURLWithPath: two + "/level.pak"))))

        let lenient = try Fixture()
        try lenient.publish(one, id: "1", fragmentation: Fragmentation(bytesPerRange: 256 << 10))
        let kept = try lenient.publish(two, id: "2", fragmentation: Fragmentation(bytesPerRange: 256 << 10))
        #expect(kept.consolidatedFiles.isEmpty && kept.reusedChunks > 0, "a bound of 20 ranges allows 4 changes")
    }

    @Test(
        "a file small enough for a pack that a change would scatter is stored whole again in the pack, not left naming an object nobody wrote; a fresh install is byte-exact"
    )
    func scatteredSmallFileGoesWholeIntoThePack() async throws {
        let (fixture, _, two, report) = try Self.scatteredPair(smallFileBytes: 16 << 20)
        let entry = try Self.pak(fixture, "2")
        #expect(report.consolidatedFiles == ["level.pak"] && entry.isWhole)
        let layout = OriginLayout(root: fixture.origin)
        for path in ObjectNaming.current.paths(of: entry) {
            #expect(FileManager.default.fileExists(atPath: layout.path(path)), "\(path) is named and was never written")
        }
        #expect(
            try await Self.installed(fixture, "fresh")
                == (try Data(contentsOf: URL(fileURLWithPath: two + "/level.pak"))))
    }

    @Test(
        "the same content twice in one pack, chunked once before and once after the chunk index learned an older chunk, is placed as the first copy was stored: both entries read the same bytes"
    )
    func duplicateInOnePack() throws {
        let fixture = try Fixture()
        try ObjectWriter.prepare(origin: fixture.origin)
        let placer = ObjectPlacer(origin: fixture.origin)
        let packer = PackWriter(origin: fixture.origin, placer: placer)
        let sha = SHA256Digest.of(Data("file".utf8)), older = SHA256Digest.of(Data("an older object".utf8))
        let a = ChunkEntry(
            offset: 0, length: 10, sha256: SHA256Digest.of(Data("a".utf8)), objectOffset: 0, objectLength: 10,
            codec: .raw)
        var b = a
        b.offset = 10
        b.sha256 = SHA256Digest.of(Data("b".utf8))
        b.objectOffset = 10
        // First copy: both chunks new (20 stored bytes). Second: chunk a was found in an older object.
        let first = FileEntry(
            path: "x/one.cfg", size: 20, mode: 0o644, sha256: sha, object: sha, bundle: "base", chunks: [a, b])
        var reusedA = a
        reusedA.object = older
        reusedA.objectOffset = 4096
        var newB = b
        newB.objectOffset = 0
        let second = FileEntry(
            path: "y/two.cfg", size: 20, mode: 0o644, sha256: sha, object: sha, bundle: "base",
            chunks: [reusedA, newB])
        try packer.add(index: 0, entry: first, stored: [UInt8](repeating: 1, count: 20))
        try packer.add(index: 1, entry: second, stored: [UInt8](repeating: 2, count: 10))
        try packer.close()
        _ = try placer.finish()
        let placed = Dictionary(uniqueKeysWithValues: packer.takeFinished().map { ($0.index, $0.entry) })
        let one = try #require(placed[0]), two = try #require(placed[1])
        #expect(one.object == two.object && one.chunks == two.chunks, "\(one.chunks) vs \(two.chunks)")
        #expect(two.path == "y/two.cfg")
    }

    @Test("ranges count runs of chunks back to back in one object; the bound grows with the stored bytes")
    func rangesAndBound() throws {
        let sha = SHA256Hasher.hash(Data("x".utf8)), other = SHA256Hasher.hash(Data("y".utf8))
        func chunk(_ at: Int64, _ length: Int, in object: SHA256Digest? = nil) -> ChunkEntry {
            ChunkEntry(
                offset: 0, length: length, sha256: sha, objectOffset: at, objectLength: length, codec: .raw,
                object: object)
        }
        #expect(Fragmentation.ranges([]) == 0)
        #expect(Fragmentation.ranges([chunk(0, 10), chunk(10, 5), chunk(15, 5)]) == 1)
        #expect(
            Fragmentation.ranges([chunk(0, 10), chunk(100, 10, in: other), chunk(110, 10, in: other), chunk(10, 5)])
                == 3)
        #expect(Fragmentation.ranges([chunk(0, 10), chunk(11, 5)]) == 2, "a gap starts a range")
        #expect(Fragmentation.ranges([chunk(0, 10, in: other), chunk(10, 10)]) == 2, "another object starts a range")
        #expect(Fragmentation.standard.maxRanges(storedBytes: 0) == 2)
        #expect(Fragmentation.standard.maxRanges(storedBytes: 64 << 20) == 258)
        #expect(Fragmentation(bytesPerRange: 4 << 20).maxRanges(storedBytes: 64 << 20) == 18)
    }
}
