import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Issue: prune's sweep of `objects/.incoming` misses the subfolders the writers use.
@Suite("Pruning what stopped publishes left", .tags(.cli))
struct PruneIncomingTests {
    /// Writes `bytes` bytes at `path` (relative to `root`), last modified `age` seconds ago.
    static func plant(_ root: String, _ path: String, bytes: Int = 1000, age: TimeInterval) throws {
        let full = root + "/" + path
        try FileManager.default.createDirectory(
            atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: bytes).write(to: URL(fileURLWithPath: full))
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -age)], ofItemAtPath: full)
    }

    @Test(
        "repo prune removes the temporary files a killed publish left in every folder of objects/.incoming (an object's and a pack's in its numbered subfolders, a sealed object's in the folder itself) once older than --grace; newer ones, a link's target outside the origin, and everything while another command holds the origin's lock stay"
    )
    func sweepsSubfolders() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.002), id: "1")
        let week: TimeInterval = 7 * 86400
        let stale = [
            "objects/.incoming/3/4242-1777", "objects/.incoming/11/pack-4242-9911", "objects/.incoming/4242-5.sealed",
            "objects/.incoming/15/deeper/4242-8"
        ]
        for path in stale { try Self.plant(fixture.origin, path, age: week + 86400) }
        let fresh = "objects/.incoming/7/4242-31"  // a publish of an hour ago, left for the grace period
        try Self.plant(fixture.origin, fresh, age: 3600)
        let outside = fixture.directory + "/elsewhere"
        try Self.plant(fixture.directory, "elsewhere/old", age: week + 86400)
        try FileManager.default.createSymbolicLink(
            atPath: fixture.origin + "/objects/.incoming/linked", withDestinationPath: outside)
        let prune = ["repo", "prune", "--origin", fixture.origin, "--keep", "5", "--grace", "7d", "--json"]

        // While a publish holds the origin's lock, prune waits its turn and removes nothing.
        var lock: OriginLock? = try OriginLock(origin: fixture.origin, purpose: "this test")
        let refused = try CLI.run(prune)
        #expect(refused.status == 75, "\(refused.stderr)")
        for path in stale + [fresh] {
            #expect(FileManager.default.fileExists(atPath: fixture.origin + "/" + path), "\(path)")
        }
        #expect(lock != nil)
        lock = nil

        let result = try CLI.run(prune)
        #expect(result.status == 0, "\(result.stderr)")
        let line = try #require(result.stdout.split(separator: "\n").last { $0.hasPrefix("{") })
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let removed = (report["removed"] as? [[String: Any]] ?? []).filter { $0["kind"] as? String == "incoming" }
        #expect(Set(removed.compactMap { $0["path"] as? String }) == Set(stale), "\(removed)")
        #expect(removed.allSatisfy { $0["bytes"] as? Int == 1000 })
        for path in stale {
            #expect(!FileManager.default.fileExists(atPath: fixture.origin + "/" + path), "\(path) is gone")
        }
        #expect(
            FileManager.default.fileExists(atPath: fixture.origin + "/" + fresh),
            "a temporary file within the grace stays")
        #expect(FileManager.default.fileExists(atPath: outside + "/old"), "a link is not followed out of the origin")
        var isFolder: ObjCBool = false
        #expect(
            FileManager.default.fileExists(atPath: fixture.origin + "/objects/.incoming/3", isDirectory: &isFolder)
                && isFolder.boolValue,
            "the writers' folders stay")
    }
}
