import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("A bucket's copy told from the origin's by its ETag", .tags(.small))
struct ListedObjectTests {
    /// An origin folder holding `files` (path → bytes).
    static func origin(_ files: [String: String]) throws -> (Fixture, OriginLayout) {
        let fixture = try Fixture()
        let root = fixture.directory + "/o"
        for (path, text) in files {
            try FileManager.default.createDirectory(
                atPath: root + "/" + FileSystem.parent(of: path), withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: root + "/" + path))
        }
        return (fixture, OriginLayout(root: root))
    }

    static func md5(_ text: String) throws -> String {
        let file = NSTemporaryDirectory() + "md5-\(UUID().uuidString)"
        try Data(text.utf8).write(to: URL(fileURLWithPath: file))
        defer { try? FileManager.default.removeItem(atPath: file) }
        return try SHA256Hasher.md5(file: file)
    }

    @Test(
        "on a store whose ETags are MD5s, a copy of the same size with other bytes is told apart; the same bytes hold")
    func md5Store() throws {
        let (fixture, layout) = try Self.origin(["a/1.json": "hello", "b/2.bin": "world"])
        defer { withExtendedLifetime(fixture) {} }
        let listed = [
            "a/1.json": ListedObject(size: 5, etag: try Self.md5("hello")),
            "b/2.bin": ListedObject(size: 5, etag: try Self.md5("wOrld"))
        ]
        let files: [(path: String, bytes: Int64)] = [("a/1.json", 5), ("b/2.bin", 5)]
        #expect(ListedObject.etagsAreMD5(listed, files: files, root: layout))
        #expect(listed["a/1.json"]?.holds(layout.path("a/1.json"), bytes: 5, etagIsMD5: true) == true)
        #expect(listed["b/2.bin"]?.holds(layout.path("b/2.bin"), bytes: 5, etagIsMD5: true) == false)
    }

    @Test(
        "on a store whose 32-hex ETags are no MD5s (SSE-KMS), files of the right size hold: nothing is sent again forever"
    )
    func kmsStore() throws {
        let (fixture, layout) = try Self.origin(["a/1.json": "hello", "b/2.bin": "world"])
        defer { withExtendedLifetime(fixture) {} }
        let listed = [
            "a/1.json": ListedObject(size: 5, etag: String(repeating: "ab", count: 16)),
            "b/2.bin": ListedObject(size: 5, etag: String(repeating: "cd", count: 16))
        ]
        let files: [(path: String, bytes: Int64)] = [("a/1.json", 5), ("b/2.bin", 5)]
        let md5 = ListedObject.etagsAreMD5(listed, files: files, root: layout)
        #expect(!md5)
        #expect(
            files.allSatisfy { listed[$0.path]?.holds(layout.path($0.path), bytes: $0.bytes, etagIsMD5: md5) == true })
        #expect(
            ListedObject(size: 5, etag: "\(String(repeating: "0", count: 32))-2").holds(
                layout.path("a/1.json"), bytes: 5, etagIsMD5: true))
    }
}
