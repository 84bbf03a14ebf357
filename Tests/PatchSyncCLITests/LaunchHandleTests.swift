import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// What a launcher holds once the game is started: a handle with the pid, the build, the game's output,
/// a way to stop it and its exit status; the build it runs stays while it runs.
@Suite("A launch handle", .tags(.cli), .serialized)
struct LaunchHandleTests {
    /// A build whose `bin/game` prints its folder, a line on stderr, then sleeps until killed (or for
    /// `GAME_SECONDS`).
    static func build(_ fixture: Fixture, _ number: Int) throws -> String {
        let folder = fixture.directory + "/game-\(number)"
        try FileManager.default.createDirectory(atPath: folder + "/bin", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: folder + "/data", withIntermediateDirectories: true)
        try Data("build \(number)\n".utf8).write(to: URL(fileURLWithPath: folder + "/data/version.txt"))
        let script = folder + "/bin/game"
        try Data("#!/bin/sh\necho \"pwd=$(pwd -P)\"\necho started >&2\nexec sleep ${GAME_SECONDS:-600}\n".utf8).write(
            to: URL(fileURLWithPath: script))
        chmod(script, 0o755)
        return folder
    }

    static func firstLine(_ handle: FileHandle?) -> String {
        var data = Data()
        while let handle, !data.contains(0x0a) {
            let more = handle.availableData
            if more.isEmpty { break }
            data.append(more)
        }
        return String(decoding: data.prefix { $0 != 0x0a }, as: UTF8.self)
    }

    @Test(
        "GameLauncher.start returns at once with the game's pid, build and output; ./bin/game runs in its own build (or --cwd's folder); nothing it uses is swapped while it runs; terminate() ends it with 128+15; with no build yet it is notPlayableYet (75); `patchsync launch -- ./bin/game` from another folder runs the new build's game in its folder"
    )
    func handle() async throws {
        let fixture = try Fixture()
        try fixture.publish(try Self.build(fixture, 1), id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let launcher = GameLauncher(install: install)

        await #expect(throws: PatchSyncError.self) { _ = try await launcher.start("./bin/game", []) }
        do {
            _ = try await launcher.start("./bin/game", [])
        } catch {
            #expect(error.code == .deferred && error.reason == .notPlayableYet, "\(error)")
        }
        let early = try CLI.run(["launch", "--install", install.root, "--json", "--events-fd", "1", "--", "./bin/game"])
        let earlyError = try lastJSON(early.stdout)
        #expect(early.status == 75 && earlyError["reason"] as? String == "notPlayableYet", "\(early.stdout)")

        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        var options = GameLauncher.Options()
        options.captureOutput = true
        let game = try await launcher.start("./bin/game", [], options: options)
        #expect(game.pid > 0 && game.isRunning)
        #expect(game.buildId == "1" && game.apply.report?.applied == true, "the ready build was applied first")
        let folder = try #require(
            URL(fileURLWithPath: install.root + "/builds/1").resolvingSymlinksInPath().path as String?)
        #expect(Self.firstLine(game.standardOutput) == "pwd=\(folder)", "the game runs in its build's folder")
        #expect(Self.firstLine(game.standardError) == "started")

        // Build 2 is staged meanwhile; while the game runs it is not swapped in, and build 1 stays.
        try fixture.publish(try Self.build(fixture, 2), id: "2")
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        let apply = try CLI.run(["apply", "--install", install.root, "--json"])
        let refused = try lastJSON(apply.stdout)
        #expect(apply.status == 75 && refused["reason"] as? String == "gameRunning", "\(apply.stdout)")
        #expect(FileManager.default.fileExists(atPath: install.root + "/builds/1/bin/game"))

        game.terminate()
        #expect(await game.exitStatus == 128 + SIGTERM)
        #expect(!game.isRunning)

        // The next start applies build 2; a working directory inside the build is honoured.
        options.workingDirectory = "data"
        let second = try await launcher.start("./bin/game", [], options: options)
        #expect(second.buildId == "2")
        let data = URL(fileURLWithPath: install.root + "/builds/2/data").resolvingSymlinksInPath().path
        #expect(Self.firstLine(second.standardOutput) == "pwd=\(data)")
        second.terminate(SIGKILL)
        #expect(await second.exitStatus == 128 + SIGKILL)

        // The command line, started from another folder: `./bin/game` is the new build's, run in its folder.
        try fixture.publish(try Self.build(fixture, 3), id: "3")
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        let three = URL(fileURLWithPath: install.root + "/builds/3").resolvingSymlinksInPath().path
        #expect(FileManager.default.currentDirectoryPath != three)
        let launched = try CLI.run(
            ["launch", "--install", install.root, "--", "./bin/game"], environment: ["GAME_SECONDS": "0"])
        #expect(
            launched.status == 0 && launched.stdout.hasPrefix("pwd=\(three)\n"), "\(launched.stdout) \(launched.stderr)"
        )
        #expect(install.currentBuild() == "3")
    }
}
