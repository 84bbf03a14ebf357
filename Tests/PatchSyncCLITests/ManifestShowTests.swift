import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// `patchsync manifest show`: what a build's manifest holds, from an origin, an install, a build folder
/// or a manifest file; a manifest a client would refuse is refused here too.
@Suite("manifest show", .tags(.cli))
struct ManifestShowTests {
    /// An 8 MiB pak, half random, with 64 KiB rewritten at each offset of `changing`.
    static func writeBuild(_ folder: String, changing: [Int] = []) throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        var random = SeededRandom(seed: 42)
        var bytes = [UInt8](repeating: 0, count: 8 << 20)
        for i in stride(from: 0, to: bytes.count, by: 2) { bytes[i] = UInt8.random(in: 0...255, using: &random) }
        for offset in changing {
            for i in offset..<(offset + (64 << 10)) { bytes[i] = UInt8.random(in: 0...255, using: &random) }
        }
        try Data(bytes).write(to: URL(fileURLWithPath: folder + "/level.pak"))
    }

    @Test(
        "an origin's build stored partly in an earlier build's objects shows its chunks elsewhere and the ranges of the changed file; a manifest file of a newer format or cut short is refused (65) by name"
    )
    func show() throws {
        let fixture = try Fixture()
        let one = fixture.directory + "/one", two = fixture.directory + "/two"
        try Self.writeBuild(one)
        try Self.writeBuild(two, changing: [1 << 20, 6 << 20])
        try fixture.publish(one, id: "1")
        try fixture.publish(two, id: "2")
        let root = fixture.origin + "/metadata/1.root.json"
        let result = try CLI.run(
            ["manifest", "show", "file://\(fixture.origin)#2", "--root", root, "--files", "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let line = try #require(result.stdout.split(separator: "\n").last)
        let shown = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(shown["buildId"] as? String == "2" && shown["formatVersion"] as? Int == Manifest.formatVersion)
        #expect((shown["chunksElsewhere"] as? Int ?? 0) > 0, "\(shown)")
        #expect((shown["mostRanges"] as? Int ?? 0) >= 3 && shown["mostRangesFile"] as? String == "level.pak")
        let files = try #require(shown["fileList"] as? [[String: Any]])
        #expect(files.count == 1 && files[0]["objects"] as? Int == 2, "\(files)")
        let human = try CLI.run(["manifest", "show", "file://\(fixture.origin)#1", "--root", root])
        #expect(human.status == 0 && human.stdout.contains("0 chunks elsewhere"), "\(human.stdout)")

        var manifest = try BundleChoiceTests.manifest(fixture, "2")
        manifest.formatVersion = Manifest.formatVersion + 1
        let newer = fixture.directory + "/newer.json"
        try JSONEncoder().encode(manifest).write(to: URL(fileURLWithPath: newer))
        let refused = try CLI.run(["manifest", "show", newer])
        #expect(refused.status == 65, "\(refused.stdout)\(refused.stderr)")
        #expect(refused.stderr.contains("format version \(Manifest.formatVersion + 1)"), "\(refused.stderr)")
        manifest.formatVersion = Manifest.formatVersion
        let whole = try JSONEncoder().encode(manifest)
        let cut = fixture.directory + "/cut.json"
        try whole.prefix(whole.count / 2).write(to: URL(fileURLWithPath: cut))
        let truncated = try CLI.run(["manifest", "show", cut])
        #expect(truncated.status == 65, "\(truncated.stdout)\(truncated.stderr)")
    }
}
