import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// A release engineer's day: the checks that stop the wrong folder going live, a dry run, what a key
/// rotation asks of each host, and a player's error that names the file a bucket lost.
@Suite("The release engineer's day", .tags(.cli))
struct ReleaseEngineerTests {
    static func keys(_ fixture: Fixture) -> [String] {
        ["--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"]
    }

    @Test(
        "a folder that drops most of the live build is refused as the wrong folder unless --replace-most; --dry-run lists the patch cost and writes nothing"
    )
    func wrongFolderAndDryRun() throws {
        let fixture = try Fixture()
        let one = try fixture.sampleBuild(1, scale: 0.003)
        try fixture.publish(one, id: "1")
        let small = fixture.directory + "/small"
        try FileManager.default.createDirectory(atPath: small, withIntermediateDirectories: true)
        try Data("just a readme\n".utf8).write(to: URL(fileURLWithPath: small + "/README.txt"))
        let before = try PruneTests.files(fixture.origin)

        let refused = try CLI.run(
            ["publish", small, "--origin", fixture.origin, "--build-id", "2"] + Self.keys(fixture))
        #expect(
            refused.status == 64 && refused.stderr.contains("is it the right folder")
                && refused.stderr.contains("--replace-most"), "\(refused.stderr)")
        #expect(try PruneTests.files(fixture.origin) == before, "nothing was written")

        let dry = try CLI.run(
            ["publish", one, "--origin", fixture.origin, "--build-id", "1.1", "--dry-run", "--json"]
                + Self.keys(fixture))
        #expect(dry.status == 0, "\(dry.stderr)")
        let report = try lastJSON(dry.stdout)
        #expect(report["dryRun"] as? Bool == true)
        let patch = try #require(report["patch"] as? [String: Any])
        #expect(
            patch["old"] as? String == "1" && (patch["total"] as? [String: Any])?["downloadBytes"] as? Int == 0,
            "\(patch)")
        #expect(try PruneTests.files(fixture.origin) == before, "a dry run writes nothing")
        let dryRefused = try CLI.run(
            ["publish", small, "--origin", fixture.origin, "--build-id", "2", "--dry-run"] + Self.keys(fixture))
        #expect(dryRefused.status == 64, "the dry run stops where the publish would")

        let forced = try CLI.run(
            ["publish", small, "--origin", fixture.origin, "--build-id", "2", "--replace-most"] + Self.keys(fixture))
        #expect(forced.status == 0, "\(forced.stderr)")
    }

    @Test(
        "a player's sync that finds a signed object missing from every mirror names the file and the upload that restores it, not the network"
    )
    func missingObjectNamed() async throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1", smallFileBytes: 0)
        let objects = try FileManager.default.subpathsOfDirectory(atPath: fixture.origin + "/objects").filter {
            $0.count > 60 && !$0.hasPrefix(".")
        }
        let lost = try #require(objects.first)
        try FileManager.default.removeItem(atPath: fixture.origin + "/objects/" + lost)
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let root = fixture.directory + "/game"
        #expect(
            try CLI.run(["init", "--install", root, "--remote", nginx.url, "--root", fixture.rootMetadata]).status == 0)
        let sync = try CLI.run(["sync", "--install", root])
        #expect(sync.status == 69, "\(sync.stderr)")
        #expect(
            sync.stderr.contains("the origin lacks") && sync.stderr.contains("upload")
                && !sync.stderr.contains("check the network"),
            "\(sync.stderr)")
    }

    @Test("rotate-root says what each host must hold from now on")
    func rotationSaysWhereKeysGo() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.002), id: "1")
        let new = fixture.directory + "/new"
        #expect(try CLI.run(["keygen", "--out", new]).status == 0)
        let rotate = try CLI.run(
            [
                "repo", "rotate-root", "--origin", fixture.origin, "--root-key", fixture.keyDirectory + "/root.key",
                "--new-root-key", new + "/root.key", "--new-online-key", new + "/online.key",
                "--targets-key", fixture.keyDirectory + "/targets.key"
            ])
        #expect(rotate.status == 0, "\(rotate.stderr)")
        #expect(
            rotate.stdout.contains("cron host (online") && rotate.stdout.contains(new + "/online.key"),
            "\(rotate.stdout)")
        #expect(rotate.stdout.contains("offline (root): " + new + "/root.key"), "\(rotate.stdout)")
    }

    @Test(
        "a publish killed after storing its objects (each file its own, or small files in packs) leaves nothing to write again: the next publish puts them in place and reuses them, leaves objects/.incoming empty, and players install the build byte-exact",
        arguments: [false, true])
    func killedPublishIsReused(packs: Bool) throws {
        let fixture = try Fixture()
        let build = fixture.directory + "/big"
        try FileManager.default.createDirectory(atPath: build, withIntermediateDirectories: true)
        var random = SeededRandom(seed: 31)
        for index in 0..<6 {
            try Data((0..<300_000).map { _ in UInt8(truncatingIfNeeded: random.next()) }).write(
                to: URL(fileURLWithPath: build + "/data\(index).bin"))
        }
        let sizes = packs ? ["--small-file", "1024", "--pack-size", "700"] : ["--small-file", "0"]
        let publish =
            ["publish", build, "--origin", fixture.origin, "--build-id", "1", "--json"] + sizes + Self.keys(fixture)
        let killed = try CLI.run(publish, environment: ["PATCHSYNC_CRASH_AT": "publishStored"])
        #expect(
            killed.status == 9 || killed.status == 137 || killed.status < 0 || killed.status > 128,
            "killed: \(killed.status) \(killed.stderr)")
        let incoming = fixture.origin + "/objects/.incoming"
        let left = try FileManager.default.subpathsOfDirectory(atPath: incoming).filter {
            !$0.hasPrefix("layouts-") && !Self.isFolder(incoming + "/" + $0)
        }
        #expect(
            left.count == (packs ? 3 : 6),
            "the killed publish left its objects (or packs of two files) unplaced: \(left)")

        let rerun = try CLI.run(publish)
        #expect(rerun.status == 0, "\(rerun.stderr)")
        let report = try lastJSON(rerun.stdout)
        #expect(
            report["objectsWritten"] as? Int == 0 && report["objectBytesWritten"] as? Int == 0,
            "nothing stored again: \(rerun.stdout)")
        let after = try FileManager.default.subpathsOfDirectory(atPath: incoming).filter {
            !Self.isFolder(incoming + "/" + $0)
        }
        #expect(after.isEmpty, "objects/.incoming holds no file: \(after)")

        let root = fixture.directory + "/game"
        #expect(
            try CLI.run(["init", "--install", root, "--remote", fixture.fileRemote, "--root", fixture.rootMetadata])
                .status == 0)
        #expect(try CLI.run(["sync", "--install", root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", root]).status == 0)
        #expect(try treeListing(root + "/current/") == (try treeListing(build + "/")))
    }

    static func isFolder(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}

@Suite("Hints that paste and run", .tags(.cli), .serialized)
struct ExpiredTargetsTests {
    @Test(
        "500 days on (targets signed for 455): the cron job's refresh exits 65 naming `repo renew --targets-key`, never 0; a player's sync then names renew, not refresh"
    )
    func expiredTargets() throws {
        let fixture = try Fixture.published()
        let keys = fixture.keyDirectory
        let refresh = try ChannelModelTests.later(
            "+500d", ["repo", "refresh", "--origin", fixture.origin, "--online-key", keys + "/online.key"])
        #expect(
            refresh.status == 65 && refresh.stdout.contains("targets.json") && refresh.stdout.contains("repo renew")
                && refresh.stdout.contains("--targets-key"),
            "\(refresh.status) \(refresh.stdout)")
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let root = fixture.directory + "/game"
        #expect(
            try CLI.run(["init", "--install", root, "--remote", nginx.url, "--root", fixture.rootMetadata]).status == 0)
        let sync = try ChannelModelTests.later("+500d", ["sync", "--install", root])
        #expect(
            sync.status == 65 && sync.stdout.contains("targets") && sync.stdout.contains("repo renew")
                && !sync.stdout.contains("repo refresh"),
            "\(sync.status) \(sync.stdout)")
    }
}
