import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// A preload once released is the channel's current build for the release engineer's tools, and a
/// channel name one typo away from an existing one never silently makes a channel no player follows.
@Suite(
    "Release day, the publisher's side: a released preload is current; a typo is no new channel", .tags(.cli),
    .serialized)
struct ReleasedPreloadTests {
    @Test(
        "after a preload is released, publish checks against it: the wrong folder is refused (64) naming build 2, a dry run costs the patch from build 2, repo status counts its files"
    )
    func releasedPreloadIsCurrent() throws {
        let day = try ReleaseDay()
        defer { day.nginx.stop() }
        #expect(try day.publish2(["--release-at", PreloadTests.releaseAt(86400)]).status == 0)
        let release = try CLI.run([
            "repo", "release", "2", "--origin", day.fixture.origin, "--online-key", day.keys + "/online.key"
        ])
        #expect(release.status == 0, "\(release.stderr)")

        let wrong = day.fixture.directory + "/wrong-folder"
        try FileManager.default.createDirectory(atPath: wrong, withIntermediateDirectories: true)
        try Data("another game\n".utf8).write(to: URL(fileURLWithPath: wrong + "/readme.txt"))
        let refused = try day.publish2([], id: "3", build: wrong)
        #expect(
            refused.status == 64 && refused.stderr.contains("of build 2") && refused.stderr.contains("right folder"),
            "the wrong-folder guard reads the released build: \(refused.status) \(refused.stderr)")

        let dry = try day.publish2(["--dry-run"], id: "3", build: day.fixture.directory + "/build-1")
        #expect(dry.status == 0 && dry.stdout.contains("players of 2 would download"), "\(dry.stdout) \(dry.stderr)")

        let status = try CLI.run(["repo", "status", "--origin", day.fixture.origin, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        let channels = try #require(json["channels"] as? [[String: Any]])
        let builds = try #require(channels.first { $0["channel"] as? String == "live" }?["builds"] as? [[String: Any]])
        let two = try #require(builds.first { $0["buildId"] as? String == "2" })
        let files = try FileManager.default.subpathsOfDirectory(atPath: day.build2).filter {
            var isDir: ObjCBool = false
            return FileManager.default.fileExists(atPath: day.build2 + "/" + $0, isDirectory: &isDir)
                && !isDir.boolValue
        }
        #expect(two["files"] as? Int == files.count, "repo status counts the released build's files: \(two)")
        #expect(two["current"] as? Bool == true)
        let human = try CLI.run(["repo", "status", "--origin", day.fixture.origin])
        #expect(human.stdout.contains("\(files.count) files"), "\(human.stdout)")
    }

    @Test(
        "a new channel one typo from an existing one is refused (64) with the channels there are, by publish and promote; --new-channel lets it through; an unrelated new name is never refused"
    )
    func channelTypo() throws {
        let fixture = try Fixture.published()
        let build = try fixture.sampleBuild(2, scale: 0.002)
        let keys = fixture.keyDirectory
        func publish(_ channel: String, _ extra: [String] = []) throws -> CLI.Result {
            try CLI.run(
                [
                    "publish", build, "--origin", fixture.origin, "--build-id", "2", "--channel", channel,
                    "--targets-key", keys + "/targets.key", "--online-key", keys + "/online.key"
                ] + extra)
        }
        let typo = try publish("lvie")
        #expect(
            typo.status == 64 && typo.stderr.contains("'lvie'") && typo.stderr.contains("close to 'live'")
                && typo.stderr.contains("--new-channel"),
            "\(typo.status) \(typo.stderr)")
        #expect(
            try Repository.load(origin: fixture.origin).targetFiles.keys.allSatisfy { !$0.contains("lvie") },
            "nothing was listed")
        let promote = try CLI.run(
            [
                "repo", "promote", "1", "--from", "live", "--to", "liev", "--origin", fixture.origin,
                "--targets-key", keys + "/targets.key", "--online-key", keys + "/online.key"
            ])
        #expect(
            promote.status == 64 && promote.stderr.contains("close to 'live'"), "\(promote.status) \(promote.stderr)")
        let meant = try publish("lvie", ["--new-channel"])
        #expect(meant.status == 0, "\(meant.stderr)")
        #expect(try publish("beta").status == 0, "a name far from every channel is a new channel as before")
    }
}

@Suite(
    "Preloads beside a live channel: a hotfix and a rollback never strand a waiting preload", .tags(.cli), .serialized)
struct PreloadBesideLiveTests {
    /// Build 1.1: build 1 with one file changed.
    static func hotfix(_ day: ReleaseDay) throws -> String {
        let folder = day.fixture.directory + "/build-1.1"
        _ = try CLI.runProgram("/bin/cp", ["-a", day.fixture.directory + "/build-1", folder])
        let file = try #require(
            try FileManager.default.subpathsOfDirectory(atPath: folder).sorted().first { path in
                var isDir: ObjCBool = false
                return FileManager.default.fileExists(atPath: folder + "/" + path, isDirectory: &isDir)
                    && !isDir.boolValue
            })
        try Data("hotfixed\n".utf8).write(to: URL(fileURLWithPath: folder + "/" + file))
        return folder
    }

    @Test(
        "a hotfix published while a preload waits goes live at once; the preload is listed again above it without a new key, players keep what they preloaded (no object fetched again), and at the release it goes live byte-exact"
    )
    func hotfixBesidePreload() throws {
        let day = try ReleaseDay()
        defer { day.nginx.stop() }
        #expect(try day.publish2(["--release-at", PreloadTests.releaseAt(86400)]).status == 0)
        let key = try Data(contentsOf: URL(fileURLWithPath: day.keys + "/content/live/2.key"))
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        let preloaded = try #require(try Install.open(at: day.root).status().preload)
        #expect(preloaded.bytesDone == preloaded.bytes && preloaded.bytes > 0)

        let hotfix = try day.publish2([], id: "1.1", build: try Self.hotfix(day))
        #expect(
            hotfix.status == 0 && hotfix.stdout.contains("pending preload 2 is listed again"),
            "\(hotfix.stdout) \(hotfix.stderr)")
        #expect(
            try Data(contentsOf: URL(fileURLWithPath: day.keys + "/content/live/2.key")) == key,
            "the preload keeps its key")
        let listing = ChannelListing(try Repository.load(origin: day.fixture.origin), channel: "live")
        #expect(listing.current?.info.buildId == "1.1")
        #expect(listing.pendingPreloads.map(\.info.buildId) == ["2"] && listing.strandedPreloads.isEmpty)

        let objectsBefore = day.nginx.bytesServed(under: "/objects/")
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(try Install.open(at: day.root).currentBuild() == "1.1", "the hotfix is live")
        let still = try #require(try Install.open(at: day.root).status().preload)
        #expect(still.buildId == "2" && still.bytesDone == still.bytes, "the preload is still whole")
        let hotfixBytes = day.nginx.bytesServed(under: "/objects/") - objectsBefore
        #expect(
            hotfixBytes < preloaded.bytes,
            "the hotfix fetched \(hotfixBytes) B, the preload is not fetched again (\(preloaded.bytes) B)")

        #expect(
            try CLI.run([
                "repo", "release", "2", "--origin", day.fixture.origin, "--online-key", day.keys + "/online.key"
            ]).status == 0)
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(
            try treeListing(day.root + "/current/") == (try treeListing(day.build2 + "/")), "the install is build 2")
    }

    @Test(
        "a released preload is an ordinary build to roll back to: repo rollback from the build after it lists it again (still sealed, its released key opening it), and players go back to it byte-exact"
    )
    func rollbackToReleasedPreload() throws {
        let day = try ReleaseDay()
        defer { day.nginx.stop() }
        #expect(try day.publish2(["--release-at", PreloadTests.releaseAt(86400)]).status == 0)
        #expect(
            try CLI.run([
                "repo", "release", "2", "--origin", day.fixture.origin, "--online-key", day.keys + "/online.key"
            ]).status == 0)
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(try day.publish2([], id: "3", build: try Self.hotfix(day)).status == 0)
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)

        let back = try CLI.run(
            [
                "repo", "rollback", "--channel", "live", "--reason", "3 crashes", "--origin", day.fixture.origin,
                "--targets-key", day.keys + "/targets.key", "--online-key", day.keys + "/online.key", "--json"
            ])
        #expect(back.status == 0, "\(back.stdout) \(back.stderr)")
        #expect(try lastJSON(back.stdout)["buildId"] as? String == "2", "\(back.stdout)")
        let objectsBefore = day.nginx.bytesServed(under: "/objects/")
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(
            try treeListing(day.root + "/current/") == (try treeListing(day.build2 + "/")),
            "the install is build 2 again")
        #expect(
            day.nginx.bytesServed(under: "/objects/") - objectsBefore < 64 << 10,
            "build 2 is kept: nothing of it is fetched again")
        #expect(try Install.open(at: day.root).status().currentRollback?.reason == "3 crashes")
    }
}
