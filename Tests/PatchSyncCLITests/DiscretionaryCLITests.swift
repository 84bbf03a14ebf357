import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// The command line of background syncs: signals, priority, what `status` shows, exit codes.
@Suite("Background syncs from the command line", .tags(.cli), .serialized)
struct DiscretionaryCLITests {
    /// An install of a 3 MB build behind a slow nginx (100 KB/s per connection).
    static func slowWorld() throws -> (Fixture, NginxOrigin, Install) {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.06), id: "1")
        // Packs make few, large requests: a slow link keeps the sync running long enough to watch.
        let nginx = try NginxOrigin(root: fixture.origin, rateLimit: "60k")
        return (fixture, nginx, try fixture.makeInstall(remotes: [nginx.url]))
    }

    static func waitForChunks(_ install: Install, _ process: Process) throws {
        if !Poll.staging(install, while: process) { Issue.record("the sync recorded no chunks") }
    }

    @Test(
        "SIGTERM or SIGINT mid-transfer: the writes in flight finish, progress is kept, exit 75 within 2 s; the next sync completes",
        arguments: [SIGTERM, SIGINT])
    func signalStops(_ number: Int32) throws {
        let (fixture, nginx, install) = try Self.slowWorld()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let sync = try CLI.start(["sync", "--install", install.root, "--json"])
        try Self.waitForChunks(install, sync.process)
        let sent = ContinuousClock.now
        kill(sync.process.processIdentifier, number)
        let out = String(decoding: sync.out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        sync.process.waitUntilExit()
        let took = ContinuousClock.now - sent
        #expect(sync.process.terminationReason == .exit && sync.process.terminationStatus == 75, "\(out)")
        #expect(took < .seconds(2), "exited \(took) after the signal")
        #expect(out.contains("stopped by \(number == SIGTERM ? "SIGTERM" : "SIGINT")"), "\(out)")
        let kept = try #require(try install.status().staging)
        #expect(kept.chunksDone > 0 && kept.chunksDone < kept.chunksTotal)
        #expect(try install.status().running == nil, "the stopped sync removed its progress row")
        // The rest comes from the same origin without the cap (the cap only kept the sync running to be stopped).
        let fast = try NginxOrigin(root: fixture.origin)
        try TwoAgentsTests.setRemotes(install, [fast.url])
        let resumed = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(resumed.status == 0, "\(resumed.stdout)")
        withExtendedLifetime(fast) {}
    }

    @Test(
        "a discretionary sync runs every thread at SCHED_IDLE and idle I/O priority, and status shows its rate and ETA")
    func priorityAndStatus() throws {
        let (fixture, nginx, install) = try Self.slowWorld()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let sync = try CLI.start(["sync", "--install", install.root, "--discretionary", "--quiet"])
        defer { if sync.process.isRunning { kill(sync.process.processIdentifier, SIGKILL) } }
        try Self.waitForChunks(install, sync.process)
        let pid = sync.process.processIdentifier
        let threads = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")
        #expect(threads.count >= 3)
        for tid in threads {
            let stat = try String(contentsOfFile: "/proc/\(pid)/task/\(tid)/stat", encoding: .utf8)
            let fields = stat[stat.range(of: ")")!.upperBound...].split(separator: " ")
            #expect(fields[38] == "5", "thread \(tid): policy \(fields[38]), not SCHED_IDLE (5)")
            let io = try CLI.runProgram("/usr/bin/ionice", ["-p", tid])
            #expect(io.stdout.hasPrefix("idle"), "thread \(tid): \(io.stdout)")
        }
        var running: RunningSync?
        try Poll.until(timeout: .seconds(120), every: .milliseconds(100)) {
            let status = try CLI.run(["status", "--install", install.root, "--json"])
            let decoder = JSONDecoder()
            decoder.dateDecodingStrategy = .iso8601
            running = try decoder.decode(InstallStatus.self, from: Data(status.stdout.utf8)).running
            return (running?.bytesPerSecond ?? 0) > 0
        }
        let shown = try #require(running)
        #expect(shown.pid == pid)
        #expect(shown.bytesDone > 0 && shown.bytesDone < shown.bytesTotal)
        let eta = try #require(shown.etaSeconds)
        let expected = Double(shown.bytesTotal - shown.bytesDone) / Double(shown.bytesPerSecond)
        #expect(abs(Double(eta) - expected) <= 1, "ETA at that rate, whole seconds: \(eta) for \(expected)")
        let human = try CLI.run(["status", "--install", install.root])
        #expect(human.stdout.contains("syncing:  process \(pid)") && human.stdout.contains("ETA"), "\(human.stdout)")
        kill(pid, SIGTERM)
        sync.process.waitUntilExit()
        #expect(sync.process.terminationStatus == 75)
    }

    @Test("the game starting mid-transfer: the discretionary sync stops within a second (exit 75), chunks kept")
    func gameStarts() throws {
        let (fixture, nginx, install) = try Self.slowWorld()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let sync = try CLI.start(["sync", "--install", install.root, "--discretionary", "--quiet"])
        try Self.waitForChunks(install, sync.process)
        let started = ContinuousClock.now
        let game = try install.holdRunningLock()
        let err = String(decoding: sync.err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        sync.process.waitUntilExit()
        let took = ContinuousClock.now - started
        #expect(sync.process.terminationStatus == 75 && err.contains("the game is running"), "\(err)")
        #expect(took < .seconds(1), "exited \(took) after the game started")
        #expect(try install.status().staging?.chunksDone ?? 0 > 0)
        withExtendedLifetime(game) {}
    }

    @Test(
        "on battery (PATCHSYNC_POWER_SUPPLY_ROOT): exit 75 with the reason; status shows when the next attempt may run")
    func batteryFromCLI() throws {
        let fixture = try Fixture.published()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let power = try PowerSupplies(in: fixture.directory)
        try power.onBattery(true)
        let env = ["PATCHSYNC_POWER_SUPPLY_ROOT": power.root]
        let result = try CLI.run(["sync", "--install", install.root, "--discretionary", "--json"], environment: env)
        #expect(result.status == 75)
        #expect(result.stdout.contains("battery") && result.stdout.contains("\"exitStatus\":75"), "\(result.stdout)")
        let status = try CLI.run(["status", "--install", install.root])
        #expect(status.stdout.contains("deferred: the machine runs on battery"), "\(status.stdout)")
        try power.onBattery(false)
        let early = try CLI.run(["sync", "--install", install.root, "--discretionary"], environment: env)
        #expect(early.status == 75 && early.stderr.contains("backing off until"), "\(early.stderr)")
        #expect(
            try CLI.run(["sync", "--install", install.root], environment: env).status == 0,
            "a sync without --discretionary runs now")
        #expect(try install.status().deferral == nil)
    }

    @Test("--deadline must be HH:MM (exit 64); --for ends a slow sync deferred (exit 75), progress kept")
    func deadlineOptions() throws {
        let (fixture, nginx, install) = try Self.slowWorld()
        defer { withExtendedLifetime((fixture, nginx)) {} }
        let bad = try CLI.run(["sync", "--install", install.root, "--deadline", "25:00"])
        #expect(bad.status == 64 && bad.stderr.contains("--deadline"), "\(bad.stderr)")
        let result = try CLI.run(["sync", "--install", install.root, "--for", "2s", "--max-rate", "200K", "--quiet"])
        #expect(
            result.status == 75 && result.stderr.contains("deadline"),
            "\(result.status) \(result.stdout) \(result.stderr)")
        #expect(try install.status().staging?.chunksDone ?? 0 > 0)
    }
}
