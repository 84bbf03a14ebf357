import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// What a store is told a file is: a manifest target keeps its `.json.gz` name while a build's manifest
/// is zstd (format 8), so its first bytes decide, not its name.
@Suite("The media type an upload gives each file", .tags(.small))
struct ContentTypeTests {
    @Test(
        "a .gz target holding a zstd frame is application/zstd, gzip bytes application/gzip; JSON and the rest by name")
    func byContent() throws {
        let fixture = try Fixture()
        func file(_ name: String, _ bytes: [UInt8]) throws -> String {
            let path = fixture.directory + "/" + name
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            return path
        }
        let frame = Array("a manifest".utf8).withUnsafeBytes { Zstd.compress($0, level: 3) }
        let zstd = try file("m.json.gz", frame)
        let gzip = try file("g.json.gz", [0x1F, 0x8B, 0x08, 0x00, 0x00])
        let short = try file("s.json.gz", [0x28, 0xB5])
        #expect(Uploader.contentType("targets/manifests/live/ab.1.json.gz", file: zstd) == "application/zstd")
        #expect(Uploader.contentType("targets/manifests/live/ab.1.json.gz", file: gzip) == "application/gzip")
        #expect(Uploader.contentType("targets/x.json.gz", file: short) == "application/gzip")
        #expect(Uploader.contentType("targets/x.json.gz", file: fixture.directory + "/absent") == "application/gzip")
        #expect(Uploader.contentType("metadata/2.targets.json", file: gzip) == "application/json")
        #expect(Uploader.contentType("objects/ab/abcd.bin", file: zstd) == "application/octet-stream")
    }
}
