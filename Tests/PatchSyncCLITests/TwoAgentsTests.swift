import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// The launcher and the background sync act on one install at once.
@Suite("One install, two agents", .tags(.cli), .serialized)
struct TwoAgentsTests {
    /// An install at build 1 with build 2 ready, and build 3 (about 3 MB) published behind a slow
    /// nginx (100 KB/s per connection) that the install now follows.
    static func world() throws -> (Fixture, NginxOrigin, Install) {
        let (fixture, install, _) = try FaultTests.setUp()  // build 1 live, build 2 published
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        try fixture.publish(try fixture.sampleBuild(3, scale: 0.03, seed: 99), id: "3")
        let nginx = try NginxOrigin(root: fixture.origin, rateLimit: "100k")
        try setRemotes(install, [nginx.url])
        return (fixture, nginx, install)
    }

    static func setRemotes(_ install: Install, _ remotes: [String]) throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: install.configPath))
        var config = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        config["remotes"] = remotes
        try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: install.configPath))
    }

    /// Waits until the sync has recorded `chunks` chunks of the build it stages.
    static func waitForStaging(_ install: Install, _ process: Process, chunks: Int = 2) throws {
        if Poll.staging(install, chunks: chunks, while: process) { return }
        Issue.record("the sync recorded no chunks")
    }

    @Test("launch while a plain sync stages the next build: the ready build is applied and the game starts")
    func launchDuringPlainSync() throws {
        let (fixture, nginx, install) = try Self.world()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let sync = try CLI.start(["sync", "--install", install.root, "--quiet"])
        defer { if sync.process.isRunning { kill(sync.process.processIdentifier, SIGKILL) } }
        try Self.waitForStaging(install, sync.process)
        let game = try CLI.run(["launch", "--install", install.root, "--", "/bin/sh", "-c", "echo game-started"])
        #expect(game.status == 0, "\(game.stderr)")
        #expect(game.stdout.contains("game-started"))
        #expect(game.stderr.contains("applied build 2"), "\(game.stderr)")
        #expect(install.currentBuild() == "2")
        #expect(sync.process.isRunning, "a plain sync keeps staging while the game runs")
        kill(sync.process.processIdentifier, SIGTERM)
        sync.process.waitUntilExit()
        try Self.setRemotes(install, [fixture.fileRemote])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        let next = try CLI.run(["launch", "--install", install.root, "--", "/bin/true"])
        #expect(next.status == 0 && install.currentBuild() == "3", "\(next.stderr)")
        try expectCompleteBuild(install)
    }

    @Test(
        "launch while a discretionary sync runs: the game starts, the sync exits 75 while the game still runs, keeping progress"
    )
    func launchDuringDiscretionarySync() throws {
        let (fixture, nginx, install) = try Self.world()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let sync = try CLI.start(["sync", "--install", install.root, "--discretionary", "--quiet"])
        defer { if sync.process.isRunning { kill(sync.process.processIdentifier, SIGKILL) } }
        try Self.waitForStaging(install, sync.process)
        // --events-fd 1: launch's lines and the game's output read from one pipe here.
        let game = try CLI.start([
            "launch", "--install", install.root, "--json", "--events-fd", "1", "--", "/bin/sh", "-c",
            "echo game-started; sleep 4"
        ])
        let started = ContinuousClock.now
        sync.process.waitUntilExit()
        let stopped = ContinuousClock.now - started
        #expect(sync.process.terminationStatus == 75)
        // The game runs 4 s: the sync stopped before it ended (DiscretionaryCLITests bounds the time itself).
        #expect(game.process.isRunning, "the sync stopped while the game still runs")
        print("discretionary sync stopped \(stopped) after launch started the game")
        let out = String(decoding: game.out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        game.process.waitUntilExit()
        #expect(game.process.terminationStatus == 0)
        #expect(out.contains("\"event\":\"apply\"") && out.contains("game-started"), "\(out)")
        #expect(install.currentBuild() == "2")
        let kept = try #require(try install.status().staging)
        #expect(kept.chunksDone > 0, "progress is kept")
        try Self.setRemotes(install, [fixture.fileRemote])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["launch", "--install", install.root, "--", "/bin/true"]).status == 0)
        #expect(install.currentBuild() == "3")
        try expectCompleteBuild(install)
    }

    @Test("Examples/Launcher: GameLauncher starts the game while the example's own sync stages the next build")
    func exampleLauncher() throws {
        let (fixture, nginx, install) = try Self.world()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let example = CLI.productsDirectory + "/launcher-example"
        try #require(FileManager.default.isExecutableFile(atPath: example), "build the launcher-example product")
        let result = try CLI.runProgram(example, [install.root, "/bin/sh", "-c", "sleep 1; echo game-ran"])
        #expect(result.status == 0, "\(result.stdout)")
        #expect(result.stdout.contains("game-ran") && result.stdout.contains("updated to build 2"), "\(result.stdout)")
        #expect(install.currentBuild() == "2")
    }

    @Test(
        "Examples/Launcher with nothing installed and a first download that fails (an origin without the repository): it says so in a player's words, tries again, and once the origin is right the game starts"
    )
    func exampleLauncherRetriesFirstDownload() throws {
        let fixture = try Fixture.published(scale: 0.01)
        let empty = fixture.directory + "/empty-origin"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        let (wrong, right) = (try NginxOrigin(root: empty), try NginxOrigin(root: fixture.origin))
        defer { withExtendedLifetime((wrong, right)) {} }
        let install = try fixture.makeInstall(remotes: [wrong.url])
        let example = CLI.productsDirectory + "/launcher-example"
        try #require(FileManager.default.isExecutableFile(atPath: example), "build the launcher-example product")
        let log = fixture.directory + "/launcher.log"
        FileManager.default.createFile(atPath: log, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: example)
        process.arguments = [install.root, "/bin/sh", "-c", "echo game-ran"]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardError = process.standardOutput
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let output = { String(decoding: (try? Data(contentsOf: URL(fileURLWithPath: log))) ?? Data(), as: UTF8.self) }
        // Every file is missing there: the first download fails, told as a player reads it.
        Poll.until(timeout: .seconds(120), every: .milliseconds(100)) {
            output().contains("The download server can't be reached")
        }
        #expect(output().contains("The download server can't be reached"), "the failure is told: \(output())")
        #expect(process.isRunning, "no game yet: \(output())")
        try Self.setRemotes(install, [right.url])
        Poll.until(timeout: .seconds(180), every: .milliseconds(100)) { !process.isRunning }
        #expect(!process.isRunning && process.terminationStatus == 0, "the launcher went on to play: \(output())")
        #expect(output().contains("game-ran"), "\(output())")
        #expect(install.currentBuild() == "1")
    }

    @Test(
        "Examples/Launcher while a background discretionary sync stages: the game starts with the ready build, the background sync exits 75"
    )
    func exampleLauncherDuringBackgroundSync() throws {
        let (fixture, nginx, install) = try Self.world()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let example = CLI.productsDirectory + "/launcher-example"
        try #require(FileManager.default.isExecutableFile(atPath: example), "build the launcher-example product")
        let sync = try CLI.start(["sync", "--install", install.root, "--discretionary", "--quiet"])
        defer { if sync.process.isRunning { kill(sync.process.processIdentifier, SIGKILL) } }
        try Self.waitForStaging(install, sync.process)
        let result = try CLI.runProgram(example, [install.root, "/bin/sh", "-c", "sleep 2; echo game-ran"])
        #expect(result.status == 0, "\(result.stdout)")
        #expect(result.stdout.contains("game-ran") && result.stdout.contains("updated to build 2"), "\(result.stdout)")
        sync.process.waitUntilExit()
        #expect(sync.process.terminationStatus == 75, "the background sync yields to the game")
        #expect(install.currentBuild() == "2")
        #expect(try install.status().staging?.chunksDone ?? 0 > 0, "its progress is kept")
    }

    @Test(
        "launch while another process holds the live tree, or another instance of the game runs: the apply is skipped, said so, and the game starts"
    )
    func applySkipped() throws {
        let (fixture, nginx, install) = try Self.world()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let fd = open(install.root + "/.patchsync/lock", O_RDWR)
        #expect(flock(fd, LOCK_EX) == 0)
        let busy = try CLI.run([
            "launch", "--install", install.root, "--json", "--", "/bin/sh", "-c", "echo game-started"
        ])
        close(fd)
        #expect(busy.status == 0)
        #expect(
            busy.stdout.contains("game-started") && busy.stderr.contains("\"skipped\""), "\(busy.stdout) \(busy.stderr)"
        )
        #expect(install.currentBuild() == "1")

        // The first game runs until the test ends it (a loaded machine may take long to stage build 3).
        let quit = fixture.directory + "/quit-first-game"
        defer { FileManager.default.createFile(atPath: quit, contents: nil) }
        let first = try CLI.start([
            "launch", "--install", install.root, "--", "/bin/sh", "-c",
            "echo first; while [ ! -e '\(quit)' ]; do sleep 0.05; done"
        ])
        #expect(String(decoding: first.out.fileHandleForReading.availableData, as: UTF8.self).contains("first"))
        #expect(install.currentBuild() == "2", "the first launch applied build 2")
        try Self.setRemotes(install, [fixture.fileRemote])
        // The launch's housekeeping after its swap may still hold the staging area (longer on a loaded
        // machine): the sync waits for it.
        let staged = try CLI.run(["sync", "--install", install.root])
        #expect(staged.status == 0, "a plain sync stages while the game runs: \(staged.stderr)")
        let second = try CLI.run(["launch", "--install", install.root, "--", "/bin/sh", "-c", "echo second"])
        #expect(second.status == 0 && second.stdout.contains("second"))
        #expect(
            second.stderr.contains("without applying") && second.stderr.contains("the game is running"),
            "\(second.stderr)")
        #expect(install.currentBuild() == "2", "build 3 waits for the running game to exit")
        FileManager.default.createFile(atPath: quit, contents: nil)
        first.process.waitUntilExit()
        #expect(try CLI.run(["launch", "--install", install.root, "--", "/bin/true"]).status == 0)
        #expect(install.currentBuild() == "3")
    }

    @Test("the install's private folder is 0700 and its lock files 0600: another local user cannot lock them")
    func lockPermissions() throws {
        let (fixture, nginx, install) = try Self.world()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        #expect(try CLI.run(["launch", "--install", install.root, "--", "/bin/true"]).status == 0)
        func mode(_ path: String) throws -> Int {
            (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
        }
        #expect(try mode(install.root + "/.patchsync") == 0o700)
        for name in ["lock", "staging.lock", "running.lock"] {
            #expect(try mode(install.root + "/.patchsync/" + name) == 0o600, "\(name)")
        }
    }
}
