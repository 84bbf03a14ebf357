import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// `current` and the recorded live build never disagree for long: whatever command opens the install
/// next finishes (or undoes) an apply killed after its flip, puts back a removed link, and forgets a live
/// build whose folder was deleted, so that status, launch and sync tell the same story.
@Suite("current and the records agree at the next command", .tags(.cli), .serialized)
struct LiveLinkTests {
    /// An install with builds `ids` published, synced and applied in turn, and one more (`ready`) synced and
    /// ready when given.
    static func installed(_ ids: [String], ready: String? = nil) throws -> (Fixture, Install) {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        for (index, id) in (ids + [ready].compactMap({ $0 })).enumerated() {
            try fixture.publish(try fixture.sampleBuild(index + 1, scale: 0.005), id: id)
            #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
            if ids.contains(id) { #expect(try CLI.run(["apply", "--install", install.root]).status == 0) }
        }
        return (fixture, install)
    }

    /// Build 1 live, build 2 ready, and an apply of 2 killed between its flip and its record.
    static func killedAfterFlip() throws -> (Fixture, Install) {
        let (fixture, install) = try installed(["1"], ready: "2")
        let killed = try CLI.run(
            ["apply", "--install", install.root], environment: ["PATCHSYNC_CRASH_AT": "applyFlipped"])
        #expect(killed.status == SIGKILL, "the apply should die after its flip: \(killed.stderr)")
        let recorded = try install.recordedFolders().current
        try #require(
            install.currentDeployment() == "2" && recorded == "1", "the kill left the link and the records apart")
        return (fixture, install)
    }

    @Test(
        "an apply killed after its flip is finished by the next command: status shows the new build current and the one before previous, and sync finds it up to date"
    )
    func killedApplyIsFinished() throws {
        let (fixture, install) = try Self.killedAfterFlip()
        defer { withExtendedLifetime(fixture) {} }
        let status = try CLI.run(["status", "--install", install.root, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let shown = try lastJSON(status.stdout)
        #expect(
            shown["current"] as? String == "2" && shown["previous"] as? String == "1" && shown["ready"] == nil,
            "\(status.stdout)")
        #expect(try install.recordedFolders().current == "2", "the records name the build the link names")
        let sync = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(sync.status == 0 && sync.stdout.contains("\"outcome\":\"upToDate\""), "\(sync.stdout)\(sync.stderr)")
        try expectCompleteBuild(install)
    }

    @Test(
        "an apply killed after its flip onto a build damaged since is undone by the next command: current goes back to the recorded build, and the next sync stages the new one anew"
    )
    func killedApplyOntoDamagedBuildIsUndone() throws {
        let (fixture, install) = try Self.killedAfterFlip()
        defer { withExtendedLifetime(fixture) {} }
        try FileManager.default.removeItem(atPath: install.root + "/builds/2/config/default.cfg")
        let status = try CLI.run(["status", "--install", install.root, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let shown = try lastJSON(status.stdout)
        #expect(shown["current"] as? String == "1" && shown["ready"] == nil, "\(status.stdout)")
        let recorded = try install.recordedFolders().current
        #expect(install.currentDeployment() == "1" && recorded == "1", "the link and the records are back on build 1")
        try expectCompleteBuild(install)
        let sync = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(sync.status == 0 && sync.stdout.contains("\"outcome\":\"ready\""), "\(sync.stdout)\(sync.stderr)")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.currentBuild() == "2")
        try expectCompleteBuild(install)
    }

    @Test(
        "a removed current link is put back by the next command, whichever it is: status shows the live build, launch plays it, sync finds it up to date",
        arguments: ["status", "launch", "sync"])
    func removedLinkIsPutBack(command: String) throws {
        let (fixture, install) = try Self.installed(["1"])
        defer { withExtendedLifetime(fixture) {} }
        try FileManager.default.removeItem(atPath: install.root + "/current")
        let arguments =
            command == "launch"
            ? ["launch", "--install", install.root, "--", "/bin/true"] : [command, "--install", install.root, "--json"]
        let result = try CLI.run(arguments)
        #expect(result.status == 0, "\(command): \(result.stdout)\(result.stderr)")
        #expect(install.currentDeployment() == "1", "\(command) puts current back on the live build")
        if command == "status" { #expect(try lastJSON(result.stdout)["current"] as? String == "1", "\(result.stdout)") }
        if command == "sync" { #expect(result.stdout.contains("\"outcome\":\"upToDate\""), "\(result.stdout)") }
        try expectCompleteBuild(install)
    }

    @Test(
        "a deleted live folder is fetched again by the next sync: until then status shows no current build and launch says the game is not playable yet; then launch plays the build"
    )
    func deletedLiveFolderIsFetchedAgain() throws {
        let (fixture, install) = try Self.installed(["1"])
        defer { withExtendedLifetime(fixture) {} }
        #expect(try shell("chmod -R u+w '\(install.root)/builds/1' && rm -rf '\(install.root)/builds/1'") == 0)
        let status = try CLI.run(["status", "--install", install.root, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(try lastJSON(status.stdout)["current"] == nil, "\(status.stdout)")
        #expect(install.currentDeployment() == nil, "the link to the deleted folder goes")
        let early = try CLI.run(["launch", "--install", install.root, "--", "/bin/true"])
        #expect(early.status == 75, "nothing to play until the build is fetched again: \(early.stderr)")
        let sync = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(
            sync.status == 0 && sync.stdout.contains("\"outcome\":\"ready\""),
            "the build is staged again: \(sync.stdout)\(sync.stderr)")
        let launch = try CLI.run(["launch", "--install", install.root, "--", "/bin/true"])
        #expect(launch.status == 0, "\(launch.stderr)")
        #expect(install.currentBuild() == "1")
        try expectCompleteBuild(install)
        #expect(try CLI.run(["verify", "--install", install.root, "--full"]).status == 0)
    }
}

@Suite("Root on a player's install", .tags(.cli), .serialized)
struct RootOnPlayersInstallTests {
    static let player: uid_t = 65534  // nobody

    /// Every file and folder under `root` whose owner is not `uid` (links included, never followed).
    static func notOwned(by uid: uid_t, under root: String) -> [String] {
        (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? []).filter { path in
            var st = stat()
            return lstat(root + "/" + path, &st) == 0 && st.st_uid != uid
        }
    }

    @Test(
        "run as root (a sudo by habit, a root cron job) on an install a player owns, sync, apply and status act as the player: every file they write is the player's, and the player's own next sync and apply work",
        .enabled(if: getuid() == 0, "needs root"))
    func rootActsAsOwner() throws {
        let fixture = try Fixture.published()
        let root = fixture.directory + "/game"
        #expect(
            try CLI.run(["init", "--install", root, "--remote", fixture.fileRemote, "--root", fixture.rootMetadata])
                .status == 0)
        #expect(chown(root, Self.player, Self.player) == 0)
        _ = try CLI.runProgram("/bin/chown", ["-R", "\(Self.player):\(Self.player)", root])
        let sync = try CLI.run(["sync", "--install", root, "--quiet"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try CLI.run(["apply", "--install", root]).status == 0)
        #expect(try CLI.run(["status", "--install", root]).status == 0)
        #expect(
            Self.notOwned(by: Self.player, under: root).isEmpty,
            "root-owned: \(Self.notOwned(by: Self.player, under: root).prefix(5))")

        try fixture.publish(try fixture.sampleBuild(2, scale: 0.002), id: "2")
        #expect(try CLI.run(["sync", "--install", root, "--quiet"]).status == 0)
        let asPlayer = try CLI.runProgram(
            "/usr/bin/setpriv",
            [
                "--reuid=\(Self.player)", "--regid=\(Self.player)", "--clear-groups", CLI.executable, "apply",
                "--install", root
            ])
        #expect(asPlayer.status == 0, "the player's own apply: \(asPlayer.stdout)")
        #expect(try Install.open(at: root).currentBuild() == "2")
    }
}
