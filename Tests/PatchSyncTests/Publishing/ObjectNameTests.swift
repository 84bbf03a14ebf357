import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("A name never changes its bytes", .tags(.medium))
struct ObjectNameTests {
    /// Writes one 8 MiB file of seeded, half-compressible bytes (one object, not packed) into `folder`.
    static func writeBuild(_ folder: String, extra: String? = nil) throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        var random = SeededRandom(seed: 42)
        var bytes = [UInt8](repeating: 0, count: 8 << 20)
        for i in stride(from: 0, to: bytes.count, by: 2) { bytes[i] = UInt8.random(in: 0...255, using: &random) }
        try Data(bytes).write(to: URL(fileURLWithPath: folder + "/level.pak"))
        if let extra { try Data(extra.utf8).write(to: URL(fileURLWithPath: folder + "/readme.txt")) }
    }

    /// A fixture and three build folders: one holding the 8 MiB file, two without it, three with it again.
    static func comeback() throws -> (Fixture, String, String, String) {
        let fixture = try Fixture()
        let one = fixture.directory + "/one", two = fixture.directory + "/two", three = fixture.directory + "/three"
        try Self.writeBuild(one)
        try FileManager.default.createDirectory(atPath: two, withIntermediateDirectories: true)
        try Data("nothing else\n".utf8).write(to: URL(fileURLWithPath: two + "/readme.txt"))
        try Self.writeBuild(three, extra: "back again\n")
        return (fixture, one, two, three)
    }

    /// The manifest of build `id` on live in `fixture`'s origin.
    static func manifest(_ fixture: Fixture, _ id: String) throws -> Manifest {
        let repo = try Repository.load(origin: fixture.origin)
        let target = Manifest.targetPath(channel: .live, buildId: try BuildID(id))
        return try Repository.manifest(in: fixture.origin, target, try #require(repo.targetFiles[target]))
    }

    @Test(
        "content that comes back after its build was unlisted, published with another codec, gets a name of its own: the object a CDN may keep keeps its bytes, and an install of the new build is byte-exact"
    )
    func comebackWithAnotherCodec() async throws {
        let (fixture, one, two, three) = try Self.comeback()
        let first = try fixture.publish(one, id: "1", keepBuilds: 1)
        let entry = try #require(try Self.manifest(fixture, "1").files.first { $0.path == "level.pak" })
        let path = OriginLayout(root: fixture.origin).objectFile(entry.object)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(first.objectsWritten >= 1 && entry.object == entry.sha256)
        try fixture.publish(two, id: "2", keepBuilds: 1)  // build 1 is no longer listed; its object stays
        try fixture.publish(three, id: "3", keepBuilds: 1, codec: try ObjectCodec(parsing: "deflate:6"))

        #expect(
            try Data(contentsOf: URL(fileURLWithPath: path)) == before,
            "the bytes under the old name are the ones written first")
        let again = try #require(try Self.manifest(fixture, "3").files.first { $0.path == "level.pak" })
        #expect(again.sha256 == entry.sha256 && again.object != entry.object, "the content got a name of its own")
        #expect(again.chunks.allSatisfy { $0.codec != .zstd }, "written with the codec asked for")

        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        let installed = try Data(contentsOf: URL(fileURLWithPath: install.root + "/current/level.pak"))
        #expect(installed == (try Data(contentsOf: URL(fileURLWithPath: three + "/level.pak"))))
    }

    @Test(
        "content that comes back with the same codec reuses the object left under its own name (it reads back as its layout): nothing written again, and the publish run again is a no-op"
    )
    func comebackWithTheSameCodec() throws {
        let (fixture, one, two, three) = try Self.comeback()
        try fixture.publish(one, id: "1", keepBuilds: 1)
        let entry = try #require(try Self.manifest(fixture, "1").files.first { $0.path == "level.pak" })
        try fixture.publish(two, id: "2", keepBuilds: 1)
        let third = try fixture.publish(three, id: "3", keepBuilds: 1)
        let again = try #require(try Self.manifest(fixture, "3").files.first { $0.path == "level.pak" })
        #expect(again.object == entry.object, "the object in place is reused")
        #expect(third.objectBytesWritten < 1 << 20, "only the readme's bytes are written: \(third.objectBytesWritten)")
        #expect(
            try fixture.publish(three, id: "3", keepBuilds: 1).alreadyPublished,
            "the same publish again changes nothing")
    }

    @Test("an object's layout name changes with every part of the layout and never equals the content's own name")
    func layoutNames() {
        let sha = SHA256Hasher.hash(Data("content".utf8))
        let chunk = ChunkEntry(offset: 0, length: 10, sha256: sha, objectOffset: 0, objectLength: 8, codec: .zstd)
        var other = chunk
        other.codec = .zlib
        var longer = chunk
        longer.objectLength = 9
        let names = [[chunk], [other], [longer]].map { ObjectWriter.layoutName(of: sha, chunks: $0) }
        #expect(Set(names).count == 3 && !names.contains(sha))
    }
}
