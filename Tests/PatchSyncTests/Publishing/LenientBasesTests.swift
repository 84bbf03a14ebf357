import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// A published manifest that clients would refuse (published by an older publisher that did not validate,
/// say with `Readme.txt` beside `README.txt`) never wedges the next publish: it is reported and skipped.
@Suite("Publishing beside a manifest clients refuse", .tags(.medium))
struct LenientBasesTests {
    @Test("a refused base manifest is skipped with a warning naming it; the next build publishes and installs")
    func refusedBaseIsSkipped() async throws {
        let fixture = try Fixture()
        let first = fixture.directory + "/b1"
        try FileManager.default.createDirectory(atPath: first, withIntermediateDirectories: true)
        try Data("readme".utf8).write(to: URL(fileURLWithPath: first + "/Readme.txt"))
        try Data(repeating: 7, count: 100_000).write(to: URL(fileURLWithPath: first + "/data.bin"))
        try fixture.publish(first, id: "1")
        // What an older publisher let through: the same manifest with a second path differing only in case.
        let manifests = try #require(
            FileManager.default.subpathsOfDirectory(atPath: fixture.origin + "/targets").first {
                $0.hasSuffix(".json.gz")
            })
        let file = fixture.origin + "/targets/" + manifests
        var manifest = try Manifest.decode(
            try Data(contentsOf: URL(fileURLWithPath: file)), what: file, validating: false)
        var clash = try #require(manifest.files.first { $0.path == "Readme.txt" })
        clash.path = "README.txt"
        manifest.files.insert(clash, at: 0)  // bytewise, "README.txt" sorts first
        try manifest.packed().write(to: URL(fileURLWithPath: file))

        let second = fixture.directory + "/b2"
        try FileManager.default.createDirectory(atPath: second, withIntermediateDirectories: true)
        try Data("readme 2".utf8).write(to: URL(fileURLWithPath: second + "/Readme.txt"))
        try Data(repeating: 7, count: 100_000).write(to: URL(fileURLWithPath: second + "/data.bin"))
        let report = try fixture.publish(second, id: "2")
        #expect(report.warnings.contains { $0.contains("skipped, clients would refuse it") }, "\(report.warnings)")

        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        #expect(try String(contentsOfFile: install.root + "/current/Readme.txt", encoding: .utf8) == "readme 2")
    }
}
