import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// One channel model: what a channel lists (installable builds, pending preloads and the keys they
/// commit to) decides what publish, promote, rollback, withdraw, release, refresh and `repo check` may do.
@Suite("One channel model: nothing a command does strands a preload or wedges the repository", .tags(.cli), .serialized)
struct ChannelModelTests {
    static func keys(_ day: ReleaseDay) -> [String] {
        ["--targets-key", day.keys + "/targets.key", "--online-key", day.keys + "/online.key"]
    }

    static func later(_ offset: String, _ arguments: [String]) throws -> CLI.Result {
        ShiftedClock.removeStaleSemaphores()
        return try CLI.runProgram(
            "/usr/bin/env", ["NO_FAKE_STAT=1", "/usr/bin/faketime", "-f", offset, CLI.executable] + arguments)
    }

    /// Plants build `id` on live: build 1's manifest with a second path that differs only in case, signed
    /// with the targets key, as a publisher before the pre-scan let through.
    static func plantRefusedBuild(_ fixture: Fixture, id: String) throws {
        var repo = try Repository.load(origin: fixture.origin)
        let one = Manifest.targetPath(channel: .live, buildId: try BuildID("1"))
        var manifest = try Repository.manifest(in: fixture.origin, one, try #require(repo.targetFiles[one]))
        var clash = try #require(manifest.files.first)
        clash.path = clash.path.uppercased() == clash.path ? clash.path.lowercased() : clash.path.uppercased()
        manifest.files.append(clash)
        manifest.files.sort { $0.path.utf8.lexicographicallyPrecedes($1.path.utf8) }  // as a manifest lists them
        manifest.buildId = try BuildID(id)
        manifest.sequence = ChannelListing(repo, channel: "live").highestSequence + 1
        let writer = TargetWriter(origin: fixture.origin, signers: fixture.signers, keepBuilds: 64, now: Date())
        try writer.write(manifest, target: Manifest.targetPath(channel: .live, buildId: manifest.buildId), repo: &repo)
    }

    @Test(
        "a signed build clients refuse wedges no command: players fail on it, `repo check` names it with `repo withdraw`, prune and publish run, rollback passes it over, withdraw takes it off without reading it and players go back to the build before"
    )
    func refusedBuildWedgesNothing() throws {
        let day = try ReleaseDay(scale: 0.005)
        defer { day.nginx.stop() }
        let origin = day.fixture.origin
        try Self.plantRefusedBuild(day.fixture, id: "1.1")
        let stuck = try CLI.run(["sync", "--install", day.root])
        #expect(stuck.status == 65, "players refuse the planted build: \(stuck.stderr)")

        let check = try CLI.run(["repo", "check", "--origin", origin])
        #expect(
            check.status == 65 && check.stderr.contains("players would refuse build 1.1")
                && check.stderr.contains("repo withdraw 1.1"), "\(check.stderr)")
        let prune = try CLI.run(["repo", "prune", "--origin", origin, "--keep", "64", "--grace", "0s"] + Self.keys(day))
        #expect(prune.status == 0, "prune reads the refused manifest for what it names: \(prune.stderr)")
        let rollbackTo = try CLI.run(
            ["repo", "rollback", "--channel", "live", "--to", "1.1", "--origin", origin] + Self.keys(day))
        #expect(rollbackTo.status != 0, "1.1 is the newest: \(rollbackTo.stderr)")

        let withdraw = try CLI.run(
            ["repo", "withdraw", "1.1", "--reason", "case clash", "--origin", origin, "--json"] + Self.keys(day))
        #expect(withdraw.status == 0, "\(withdraw.stderr)")
        let report = try lastJSON(withdraw.stdout)
        #expect(report["relisted"] as? String == "1" && report["channel"] as? String == "live", "\(withdraw.stdout)")
        let listed = Set(try Repository.load(origin: origin).targetFiles.values.compactMap { $0.custom?.buildId })
        #expect(!listed.contains("1.1"), "1.1 is no longer listed: \(listed)")
        #expect(try CLI.run(["repo", "check", "--origin", origin]).status == 0)
        let sync = try CLI.run(["sync", "--install", day.root, "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(try treeListing(day.root + "/current/") == (try treeListing(day.fixture.directory + "/build-1/")))

        // A publish beside it, and a rollback from a build clients refuse, are fine too.
        try Self.plantRefusedBuild(day.fixture, id: "1.2")
        let rollback = try CLI.run(
            ["repo", "rollback", "--channel", "live", "--origin", origin, "--json"] + Self.keys(day))
        #expect(rollback.status == 0, "\(rollback.stderr)")
        #expect(try lastJSON(rollback.stdout)["buildId"] as? String == "1", "\(rollback.stdout)")
        let publish = try day.publish2([], id: "2")
        #expect(publish.status == 0, "\(publish.stderr)")
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(try treeListing(day.root + "/current/") == (try treeListing(day.build2 + "/")))
    }

    @Test(
        "a preload another preload shares sealed objects with cannot be withdrawn alone; a promote onto a channel with pending preloads lists them again above it; publishing a withdrawn preload id again never overwrites its content key"
    )
    func pendingPreloads() throws {
        let day = try ReleaseDay(scale: 0.005)
        defer { day.nginx.stop() }
        let origin = day.fixture.origin
        #expect(try day.publish2(["--release-at", PreloadTests.releaseAt(86400)]).status == 0)
        let build3 = try day.fixture.sampleBuild(3, scale: 0.005)
        #expect(
            try day.publish2(["--release-at", PreloadTests.releaseAt(2 * 86400)], id: "3", build: build3).status == 0)
        let plan3 = try Repository.plan(
            in: origin, Manifest.targetPath(channel: .live, buildId: try BuildID("3")),
            try #require(
                try Repository.load(origin: origin).targetFiles[
                    Manifest.targetPath(channel: .live, buildId: try BuildID("3"))]))
        #expect(plan3.keys["2"] != nil, "the fixture needs 3 to share objects sealed with 2's key")

        let alone = try CLI.run(["repo", "withdraw", "2", "--origin", origin] + Self.keys(day))
        #expect(alone.status == 64 && alone.stderr.contains("withdraw 3 first"), "\(alone.stderr)")

        // A promote onto the channel goes live at once; both preloads are listed again above it, keys unchanged.
        let beta = try CLI.run(
            [
                "publish", day.fixture.directory + "/build-1", "--origin", origin, "--build-id", "1b", "--channel",
                "beta",
                "--bundles", day.fixture.directory + "/bundles.json"
            ] + Self.keys(day))
        #expect(beta.status == 0, "\(beta.stderr)")
        let promote = try CLI.run(
            ["repo", "promote", "1b", "--from", "beta", "--to", "live", "--origin", origin] + Self.keys(day))
        #expect(
            promote.status == 0 && promote.stderr.contains("pending preload 2 is listed again"), "\(promote.stderr)")
        let listing = ChannelListing(try Repository.load(origin: origin), channel: "live")
        #expect(
            listing.current?.info.buildId == "1b" && listing.pendingPreloads.map(\.info.buildId).sorted() == ["2", "3"])
        #expect(listing.strandedPreloads.isEmpty)

        // Withdrawn, a preload id published again gets a new key; the old key file is set aside, never overwritten.
        let key3 = day.keys + "/content/live/3.key"
        let oldKey = try Data(contentsOf: URL(fileURLWithPath: key3))
        #expect(try CLI.run(["repo", "withdraw", "3", "--origin", origin] + Self.keys(day)).status == 0)
        #expect(
            try day.publish2(["--release-at", PreloadTests.releaseAt(2 * 86400)], id: "3", build: build3).status == 0)
        let aside = try FileManager.default.contentsOfDirectory(atPath: day.keys + "/content/live").filter {
            $0.hasPrefix("3.key.replaced-")
        }
        #expect(aside.count == 1, "\(aside)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: day.keys + "/content/live/" + aside[0])) == oldKey)

        // Released in order, both install byte-exact; then promote runs.
        #expect(
            try CLI.run(["repo", "release", "2", "--origin", origin, "--online-key", day.keys + "/online.key"]).status
                == 0)
        #expect(
            try CLI.run(["repo", "release", "3", "--origin", origin, "--online-key", day.keys + "/online.key"]).status
                == 0)
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(try treeListing(day.root + "/current/") == (try treeListing(build3 + "/")))
        let after = try CLI.run(
            ["repo", "promote", "1b", "--from", "beta", "--to", "live", "--origin", origin] + Self.keys(day))
        #expect(after.status == 0, "\(after.stderr)")
    }

    @Test(
        "the content keys live in one folder that publish records: the cron refresh with the online key kept elsewhere releases on time; `repo check` fails on a preload overdue and names `repo release`; release finds the channel of a unique build id"
    )
    func contentKeysAndOverduePreload() throws {
        let day = try ReleaseDay(scale: 0.005)
        defer { day.nginx.stop() }
        let origin = day.fixture.origin
        #expect(try day.publish2(["--release-at", PreloadTests.releaseAt(3600)]).status == 0)
        let moved = day.fixture.directory + "/ops"
        try FileManager.default.createDirectory(atPath: moved, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: day.keys + "/online.key", toPath: moved + "/online.key")

        let overdue = try Self.later("+2h", ["repo", "check", "--origin", origin])
        #expect(
            overdue.status == 65 && overdue.stdout.contains("preload 2 of live was due")
                && overdue.stdout.contains("repo release 2"), "\(overdue.stdout)")
        let refresh = try Self.later(
            "+2h", ["repo", "refresh", "--origin", origin, "--online-key", moved + "/online.key", "--json"])
        #expect(refresh.status == 0, "the recorded key folder is found: \(refresh.stdout)")
        #expect(try Repository.load(origin: origin).isReleased(channel: "live", build: "2"))
        #expect(try Self.later("+2h", ["repo", "check", "--origin", origin]).status == 0)

        let again = try CLI.run(["repo", "release", "2", "--origin", origin, "--online-key", moved + "/online.key"])
        #expect(again.status == 0 && again.stdout.contains("already released"), "\(again.stdout) \(again.stderr)")
    }

    @Test(
        "promote writes delta packs from the target channel's builds: live players patch the promoted build by deltas, as diff of live's build and the beta build (#BUILD@CHANNEL) predicts"
    )
    func promoteWritesDeltas() throws {
        let day = try ReleaseDay(scale: 0.005)
        defer { day.nginx.stop() }
        let origin = day.fixture.origin
        let beta = try day.publish2(["--channel", "beta", "--json"], id: "2")
        #expect(beta.status == 0, "\(beta.stderr)")
        // diff predicts the promote's route: OLD live's build, NEW the beta build (`#BUILD@CHANNEL`).
        let predicted = try CLI.run([
            "diff", "file://\(origin)#1", "file://\(origin)#2@beta", "--root", day.fixture.rootMetadata, "--json"
        ])
        #expect(predicted.status == 0, "\(predicted.stderr)")
        let predictedPatched = try #require(
            (try lastJSON(predicted.stdout)["total"] as? [String: Any])?["filesPatched"] as? Int)
        let promote = try CLI.run(
            ["repo", "promote", "2", "--from", "beta", "--to", "live", "--origin", origin, "--json"] + Self.keys(day))
        #expect(promote.status == 0, "\(promote.stderr)")
        let deltas = try #require(try lastJSON(promote.stdout)["deltas"] as? [[String: Any]])
        #expect(deltas.contains { $0["from"] as? String == "1" }, "a pack from live's build 1: \(promote.stdout)")
        let fromOne = try #require(deltas.first { $0["from"] as? String == "1" })
        #expect(
            fromOne["files"] as? Int == predictedPatched,
            "diff predicted \(predictedPatched) files by delta: \(promote.stdout)")
        let sync = try CLI.run(["sync", "--install", day.root, "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        let patched = try lastJSON(sync.stdout)["filesPatched"] as? Int ?? 0
        #expect(patched > 0, "live players patch by deltas: \(sync.stdout)")
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(try treeListing(day.root + "/current/") == (try treeListing(day.build2 + "/")))
    }

    @Test(
        "regression: withdrawing a channel's only build, or the build a rollback put back, never makes a sequence go back: what stays listed is never below what players saw, and the next publish takes a sequence above the withdrawn one"
    )
    func withdrawNeverGoesBack() throws {
        let day = try ReleaseDay(scale: 0.005)
        defer { day.nginx.stop() }
        let origin = day.fixture.origin
        #expect(try day.publish2([], id: "2").status == 0)
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        // Rollback lists 1 again (sequence 3) and marks 2 withdrawn; withdrawing 1 must not leave 2 (sequence 2) current.
        #expect(try CLI.run(["repo", "rollback", "--channel", "live", "--origin", origin] + Self.keys(day)).status == 0)
        let withdraw = try CLI.run(["repo", "withdraw", "1", "--origin", origin] + Self.keys(day))
        #expect(withdraw.status == 0 && withdraw.stderr.contains("taken off too"), "\(withdraw.stderr)")
        #expect(
            ChannelListing(try Repository.load(origin: origin), channel: "live").builds.isEmpty,
            "nothing below stays listed")
        let idle = try CLI.run(["sync", "--install", day.root])
        #expect(idle.status != 65, "no rollback for players to refuse: \(idle.stderr)")

        let three = try day.publish2(["--json"], id: "3", build: try day.fixture.sampleBuild(3, scale: 0.005))
        #expect(three.status == 0, "\(three.stderr)")
        #expect(try lastJSON(three.stdout)["sequence"] as? Int == 4, "above the 3 players saw: \(three.stdout)")
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(try treeListing(day.root + "/current/") == (try treeListing(day.fixture.directory + "/build-3/")))
    }
}
