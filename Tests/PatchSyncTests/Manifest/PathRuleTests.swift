import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("One path rule for publish, the client and staging", .tags(.small))
struct PathRuleTests {
    @Test(
        "a component that starts with a combining mark, or is not NFC, is refused; NFC names in any script pass",
        arguments: ["D/\u{301}x", "\u{301}", "a/\u{20DD}b", "e\u{301}", "caf\u{65}\u{301}/x"])
    func refusedComponents(path: String) {
        #expect(PathRule.problem(path) != nil)
        #expect(throws: PatchSyncError.self) { try Manifest.checkPath(path) }
    }

    @Test("plain and NFC paths pass", arguments: ["a/b.txt", "caf\u{e9}/men\u{fc}.txt", "日本語/ファイル", "x/.hidden"])
    func acceptedPaths(path: String) throws {
        #expect(PathRule.problem(path) == nil)
        try Manifest.checkPath(path)
    }

    @Test("paths are split on the byte '/', never on characters: a '/' fused with a combining mark still splits")
    func splitsOnBytes() {
        #expect(PathRule.components("D/\u{301}x") == ["D", "\u{301}x"])
        #expect(PathRule.ancestors("D/\u{301}x/y") == ["D", "D/\u{301}x"])
        #expect(PathRule.split("D/\u{301}x").folder == "D")
        #expect(PathRule.split("D/\u{301}x").name == "\u{301}x", "a combining mark after the slash stays the name's")
        #expect(PathRule.split("dir/\u{200D}a").name == "\u{200D}a", "so does a joiner")
    }

    @Test("links resolve as the kernel resolves them, case-sensitively: a real folder D is not the link d")
    func caseSensitiveResolution() {
        let links = ["d": "x/y/z/w/v/u/t/s/r/q", "L": "D/" + String(repeating: "../", count: 10) + "outside"]
        #expect(!LinkResolver(targets: links).staysInside("L"), "D is one level deep, so ten '..' climb out")
        #expect(LinkResolver(targets: ["d": "x/y", "L": "d/../.."]).staysInside("L"))
    }

    /// The tester's build folder: a real folder D/ with a file whose name starts with U+0301, a link
    /// d deep into x/…/q, and a link L climbing ten levels from D.
    static func hostileFolder(_ fixture: Fixture, combining: Bool) throws -> String {
        let build = fixture.directory + "/hostile-\(combining)"
        try FileManager.default.createDirectory(atPath: build + "/D", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            atPath: build + "/x/y/z/w/v/u/t/s/r/q", withIntermediateDirectories: true)
        try Data("f".utf8).write(to: URL(fileURLWithPath: build + "/D/" + (combining ? "\u{301}f" : "f")))
        try FileManager.default.createSymbolicLink(atPath: build + "/d", withDestinationPath: "x/y/z/w/v/u/t/s/r/q")
        try FileManager.default.createSymbolicLink(
            atPath: build + "/L",
            withDestinationPath: "D/" + String(repeating: "../", count: 10) + "tmp")
        return build
    }

    @Test(
        "publish refuses the tester's build folder whose link L resolves outside, naming the path, and signs nothing",
        arguments: [true, false])
    func publishRefusesEscapingLink(combining: Bool) throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.002), id: "1")
        let targetsBefore = try Data(contentsOf: URL(fileURLWithPath: fixture.origin + "/metadata/timestamp.json"))
        let build = try Self.hostileFolder(fixture, combining: combining)
        #expect(throws: PatchSyncError.self) { try fixture.publish(build, id: "2") }
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: fixture.origin + "/metadata/timestamp.json")) == targetsBefore)
    }

    @Test("a client refuses a manifest in which a link and a real folder differ only in case")
    func clientRefusesCaseClash() throws {
        let file = FileEntry(
            path: "D/f", size: 0, mode: 0o644, sha256: SHA256Hasher.hash(Data()), object: SHA256Hasher.hash(Data()),
            bundle: "base", chunks: [])
        let manifest = Manifest(
            formatVersion: 3, buildId: try BuildID("1"), channel: .live, sequence: 1, chunking: .standard,
            bundles: [.base], files: [file],
            links: [LinkEntry(path: "d", target: "x", bundle: "base")])
        #expect(throws: PatchSyncError.self) { try manifest.validate() }
    }
}
