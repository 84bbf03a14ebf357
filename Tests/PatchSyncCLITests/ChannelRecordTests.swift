import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// What targets metadata says of a channel beyond its builds: the highest sequence it ever listed,
/// signed and uploaded with the repository, and why a withdraw left it empty.
@Suite("A channel's signed record: the sequence players saw, and why it is empty", .tags(.cli), .serialized)
struct ChannelRecordTests {
    static func keys(_ fixture: Fixture) -> [String] {
        ["--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"]
    }

    @Test(
        "a channel emptied by withdraw tells players so with its reason (exit 75, reason withdrawn), not 'origin unavailable'; the next publish lists a higher sequence and players install it"
    )
    func withdrawnChannel() throws {
        let fixture = try Fixture.published()
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let root = fixture.directory + "/game"
        #expect(
            try CLI.run(["init", "--install", root, "--remote", nginx.url, "--root", fixture.rootMetadata]).status == 0)
        #expect(try CLI.run(["sync", "--install", root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", root]).status == 0)

        let withdraw = try CLI.run(
            ["repo", "withdraw", "1", "--reason", "saves corrupt on load", "--origin", fixture.origin]
                + Self.keys(fixture))
        #expect(withdraw.status == 0, "\(withdraw.stderr)")
        let sync = try CLI.run(["sync", "--install", root, "--json"])
        #expect(sync.status == 75, "\(sync.status) \(sync.stderr)")
        let error = try lastJSON(sync.stdout)
        #expect(error["reason"] as? String == "withdrawn" && error["exitStatus"] as? Int == 75, "\(sync.stdout)")
        #expect((error["error"] as? String)?.contains("saves corrupt on load") == true, "\(sync.stdout)")
        #expect(
            try treeListing(root + "/current/") == (try treeListing(fixture.directory + "/build-1/")),
            "the installed build is untouched")

        let republished = try CLI.run(
            [
                "publish", try fixture.sampleBuild(2, scale: 0.002), "--origin", fixture.origin, "--build-id", "2",
                "--json"
            ] + Self.keys(fixture))
        #expect(republished.status == 0, "\(republished.stderr)")
        #expect(try lastJSON(republished.stdout)["sequence"] as? Int == 2, "above the withdrawn build's sequence")
        let repo = try Repository.load(origin: fixture.origin)
        #expect(
            repo.targetFiles[ChannelRecord.targetPath(channel: "live")] == nil,
            "the record goes once the builds say it all")
        #expect(try CLI.run(["sync", "--install", root, "--quiet"]).status == 0)
    }

    @Test(
        "the highest sequence is in signed targets: a withdrawn preload's sequence is never given again, even by an origin whose unsigned files are gone (rebuilt from its bucket)"
    )
    func highestSequenceSigned() throws {
        let day = try ReleaseDay()
        defer { day.nginx.stop() }
        let origin = day.fixture.origin
        #expect(try day.publish2(["--release-at", PreloadTests.releaseAt(86400)]).status == 0)
        #expect(try CLI.run(["repo", "withdraw", "2", "--origin", origin] + Self.keys(day.fixture)).status == 0)
        let record = try #require(
            try Repository.load(origin: origin).targetFiles[ChannelRecord.targetPath(channel: "live")]?.channelRecord)
        #expect(record.highestSequence == 2 && record.withdrawn == nil, "\(record)")
        // What a bucket does not hold: every dot-file of the origin folder.
        for name in try FileManager.default.contentsOfDirectory(atPath: origin) where name.hasPrefix(".") {
            try FileManager.default.removeItem(atPath: origin + "/" + name)
        }
        let next = try day.publish2(["--json"], id: "3")
        #expect(next.status == 0, "\(next.stderr)")
        #expect(try lastJSON(next.stdout)["sequence"] as? Int == 3, "\(next.stdout)")
        let check = try CLI.run(["repo", "check", "--origin", origin])
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
    }
}
