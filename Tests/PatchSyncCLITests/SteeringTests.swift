import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// A session a launcher can steer: a foreground sync takes over from a background one, any process
/// follows a running sync, and the bandwidth cap changes while a sync runs.
@Suite("Steering a sync", .tags(.cli), .serialized)
struct SteeringTests {
    /// Reads `process`'s stdout lines until it ends; `first` runs once, at its first transfer event.
    static func collect(_ started: (process: Process, out: Pipe, err: Pipe), first: () throws -> Void = {}) rethrows
        -> [[String: Any]]
    {
        var lines: [[String: Any]] = []
        var pending = Data()
        var fired = false
        let handle = started.out.fileHandleForReading
        while true {
            let data = handle.availableData
            if data.isEmpty { break }
            pending.append(data)
            while let newline = pending.firstIndex(of: 0x0a) {
                let line = pending[pending.startIndex..<newline]
                pending.removeSubrange(pending.startIndex...newline)
                guard let event = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
                    continue
                }
                lines.append(event)
                if !fired, event["event"] as? String == "transfer" {
                    fired = true
                    try first()
                }
            }
        }
        started.process.waitUntilExit()
        return lines
    }

    @Test(
        "a foreground sync takes over from a discretionary one: the background sync stops with 75 (reason otherSync) after recording its progress, the foreground one finishes at full speed, and `sync --attach` from a third process follows the background sync to its end"
    )
    func takeOverAndAttach() throws {
        let (fixture, nginx, install) = try DownloadPageTests.world(megabytes: 8)
        defer {
            nginx.stop()
            withExtendedLifetime(fixture) {}
        }
        // 8 MiB at 256 KiB/s would take 32 s in the background.
        #expect(
            try CLI.run(["config", "set", "discretionaryMaxBytesPerSecond", "256K", "--install", install.root]).status
                == 0)
        let background = try CLI.start(["sync", "--install", install.root, "--discretionary", "--json"])
        defer { if background.process.isRunning { kill(background.process.processIdentifier, SIGKILL) } }
        var attached: (process: Process, out: Pipe, err: Pipe)?
        var foreground: (status: Int32, stdout: String, stderr: String)?
        var foregroundTook = Duration.zero
        let backgroundLines = try Self.collect(background) {
            attached = try CLI.start(["sync", "--install", install.root, "--attach", "--json"])
            usleep(300_000)
            let started = ContinuousClock.now
            let run = try CLI.run(["sync", "--install", install.root, "--json"])
            foregroundTook = ContinuousClock.now - started
            foreground = (run.status, run.stdout, run.stderr)
        }
        #expect(background.process.terminationStatus == 75, "\(backgroundLines.last ?? [:])")
        #expect(backgroundLines.last?["reason"] as? String == "otherSync", "\(backgroundLines.last ?? [:])")
        let fg = try #require(foreground)
        #expect(fg.status == 0, "\(fg.stderr) \(fg.stdout.suffix(300))")
        #expect(try lastJSON(fg.stdout)["outcome"] as? String == "ready")
        #expect(foregroundTook < .seconds(20), "the foreground sync ran at full speed: \(foregroundTook)")
        let follower = try #require(attached)
        let followed = try Self.collect(follower)
        #expect(
            follower.process.terminationStatus == 75,
            "the follower ends as the followed sync did: \(followed.last ?? [:])")
        #expect(followed.contains { $0["event"] as? String == "transfer" }, "the follower saw the transfer")
        #expect(followed.last?["reason"] as? String == "otherSync")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(
            try CLI.run(["verify", "--install", install.root, "--full"]).status == 0,
            "the build the two syncs made together is exact")
    }

    @Test(
        "a foreground sync beside another foreground one is deferred with reason otherSync and a hint to attach; attach with no sync running says so"
    )
    func foregroundBesideForeground() throws {
        let (fixture, nginx, install) = try DownloadPageTests.world(megabytes: 4)
        defer {
            nginx.stop()
            withExtendedLifetime(fixture) {}
        }
        #expect(try CLI.run(["config", "set", "maxBytesPerSecond", "256K", "--install", install.root]).status == 0)
        let first = try CLI.start(["sync", "--install", install.root, "--json"])
        defer { if first.process.isRunning { kill(first.process.processIdentifier, SIGKILL) } }
        var second: (status: Int32, stdout: String, stderr: String)?
        _ = try Self.collect(first) {
            let run = try CLI.run(["sync", "--install", install.root, "--json"])
            second = (run.status, run.stdout, run.stderr)
            kill(first.process.processIdentifier, SIGTERM)
        }
        let refused = try #require(second)
        #expect(refused.status == 75)
        let error = try lastJSON(refused.stdout)
        #expect(
            error["reason"] as? String == "otherSync" && (error["hint"] as? String ?? "").contains("--attach"),
            "\(error)")
        let idle = try CLI.run(["sync", "--install", install.root, "--attach", "--json"])
        let idleResult = try lastJSON(idle.stdout)
        #expect(idle.status == 0 && idleResult["running"] as? Bool == false, "\(idle.stdout)")
    }

    @Test(
        "the cap changes while a sync runs: `config set`/`unset` from another process applies within a second, and SyncSession.setMaxBytesPerSecond lifts a cap set in SyncOptions"
    )
    func capChangesWhileRunning() async throws {
        let (fixture, nginx, install) = try DownloadPageTests.world(megabytes: 8)
        defer {
            nginx.stop()
            withExtendedLifetime(fixture) {}
        }
        // From the command line: 8 MiB at 256 KiB/s takes 32 s; the cap is lifted after the first event.
        #expect(try CLI.run(["config", "set", "maxBytesPerSecond", "256K", "--install", install.root]).status == 0)
        let started = ContinuousClock.now
        let sync = try CLI.start(["sync", "--install", install.root, "--json"])
        defer { if sync.process.isRunning { kill(sync.process.processIdentifier, SIGKILL) } }
        let lines = try Self.collect(sync) {
            let unset = try CLI.run(["config", "unset", "maxBytesPerSecond", "--install", install.root])
            #expect(unset.status == 0, "\(unset.stderr)")
        }
        #expect(sync.process.terminationStatus == 0, "\(lines.last ?? [:])")
        #expect(
            ContinuousClock.now - started < .seconds(20), "the lifted cap let the sync finish early (32 s at the cap)")

        // From Swift: SyncSession.setMaxBytesPerSecond caps a sync as it starts (8 MiB at 64 KiB/s: 128 s); after
        // 3 s the sync's own record shows no more than the cap let through, then the cap is lifted and it finishes.
        let second = try fixture.makeInstall("second", remotes: [nginx.url])
        let clock = ContinuousClock.now
        let session = second.startSync(SyncOptions())
        session.setMaxBytesPerSecond(64 << 10)
        let events = Task {
            for await _ in session.events {}
        }
        try await Task.sleep(for: .seconds(3))
        let during = try second.status().running?.bytesDone ?? 0
        #expect(during <= 4 * (64 << 10) + (1 << 20), "under a 64 KiB/s cap, \(during) bytes in 3 s")
        session.setMaxBytesPerSecond(nil)
        await events.value
        let report = try await session.result()
        #expect(report.outcome == .ready)
        #expect(ContinuousClock.now - clock < .seconds(90), "the lifted cap let it finish (128 s at the cap)")
    }
}
