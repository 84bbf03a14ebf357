import Foundation
@testable import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("Objects in the origin", .tags(.medium))
struct ObjectWriterTests {
    @Test("an object is named by the file's SHA-256, stores compressible chunks deflated and random ones raw")
    func layout() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        let report = try fixture.publish(build, id: "1")
        #expect(report.objectsWritten > 0)
        let manifest = try Manifest.decode(
            try Data(contentsOf: URL(fileURLWithPath: try manifestFile(fixture))), what: "manifest")
        let level = try #require(manifest.files.first { $0.path.hasSuffix(".map") })
        let texture = try #require(manifest.files.first { $0.path.hasSuffix(".dds") })
        #expect(level.chunks.allSatisfy { $0.codec == .zlib && $0.objectLength < $0.length })
        #expect(texture.chunks.allSatisfy { $0.codec == .raw && $0.objectLength == $0.length })
        for file in [level, texture] {
            #expect(file.object == (try SHA256Digest.of(file: build + "/" + file.path)))
            let size = try FileManager.default.attributesOfItem(
                atPath: fixture.origin + "/" + ObjectID.path(file.object))[.size] as? Int
            #expect(size == file.chunks.reduce(0) { $0 + $1.objectLength })
        }
    }

    @Test("publishing the same build again writes nothing and keeps the metadata")
    func republishIsNoOp() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.005)
        try fixture.publish(build, id: "1")
        let before = try FileManager.default.contentsOfDirectory(atPath: fixture.origin + "/metadata").sorted()
        let again = try fixture.publish(build, id: "1")
        #expect(again.alreadyPublished)
        #expect(again.objectsWritten == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.origin + "/metadata").sorted() == before)
        let changed = try fixture.sampleBuild(2, scale: 0.005)
        #expect(throws: PatchSyncError.self) { try fixture.publish(changed, id: "1") }
    }

    func manifestFile(_ fixture: Fixture) throws -> String {
        let dir = fixture.origin + "/targets/manifests/live"
        return dir + "/" + (try #require(try FileManager.default.contentsOfDirectory(atPath: dir).first))
    }
}
