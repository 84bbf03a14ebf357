import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// `sync --discretionary` from Swift, with the clock, the power supply and the network's metered
/// flag injected: each condition defers before any request and while transfers run, the
/// deadline stops a run, and the backoff spaces deferred runs.
@Suite("Discretionary syncs", .tags(.large))
struct DiscretionaryTests {
    struct World {
        let fixture: Fixture
        let nginx: NginxOrigin
        let install: Install
        let clock = ManualClock(ManualClock.utc(10))
        let power: PowerSupplies
        var metered: Bool? = false

        /// `bigFile`: the size of one more file of random bytes in the build.
        init(
            scale: Double = 0.004, rate: String? = nil, chunking: ChunkingParameters = .standard, bigFile: Int = 0,
            configure: (inout InstallConfig) -> Void = { _ in }
        ) throws {
            fixture = try Fixture()
            let build = try fixture.sampleBuild(1, scale: scale)
            if bigFile > 0 {
                try Data((0..<bigFile).map { _ in UInt8.random(in: 0...255) }).write(
                    to: URL(fileURLWithPath: build + "/big.bin"))
            }
            try fixture.publish(build, id: "1", chunking: chunking)
            nginx = try NginxOrigin(root: fixture.origin, rateLimit: rate)
            install = try fixture.makeInstall(remotes: [nginx.url], configure: configure)
            power = try PowerSupplies(in: fixture.directory)
        }

        var syncer: Syncer {
            var syncer = Syncer(install: install)
            syncer.discretionary = true
            syncer.environment = .testing(clock: clock, power: power, metered: metered)
            return syncer
        }

        /// Runs a discretionary sync; the deferred error, or nil when it completed.
        func deferred(_ syncer: Syncer? = nil) async throws -> PatchSyncError? {
            do {
                _ = try await (syncer ?? self.syncer).run()
                return nil
            } catch {
                #expect(error.code == .deferred, "\(error)")
                return error
            }
        }

        var deferral: Deferral? { get throws { try install.status().deferral } }
    }

    @Test("while the game runs, a discretionary sync exits 75 before any request and records when to try next")
    func gameRunning() async throws {
        let world = try World()
        let game = try world.install.holdRunningLock()
        let error = try #require(try await world.deferred())
        #expect(error.description.contains("the game is running"))
        #expect(world.nginx.requests().isEmpty, "no network traffic before the conditions hold")
        let deferral = try #require(try world.deferral)
        #expect(deferral.reason == .gameRunning && deferral.count == 1)
        // Backoff 600 s doubled 0 times, half fixed + half × jitter 0.5.
        #expect(deferral.nextAttempt == world.clock.now() + 450)
        withExtendedLifetime(game) {}
    }

    @Test("on battery the run defers; on mains (or with deferOnBattery false) it completes")
    func battery() async throws {
        let world = try World()
        try world.power.onBattery(true)
        #expect(try await world.deferred()?.description.contains("battery") == true)
        #expect(world.nginx.requests().isEmpty)
        try world.power.onBattery(false)
        world.clock.advance(by: 3600)  // past the backoff
        #expect(try await world.deferred() == nil)
        #expect(try world.install.status().ready == "1")

        let unplugged = try World { $0.deferOnBattery = false }
        try unplugged.power.onBattery(true)
        #expect(try await unplugged.deferred() == nil)
    }

    @Test("inside the play hours the run defers (ranges may wrap midnight); outside them it completes")
    func playHours() async throws {
        let world = try World { $0.playHours = ["22:30-01:00", "12:00-13:00"] }
        for (hour, minute) in [(23, 0), (0, 59), (12, 0)] {
            world.clock.set(ManualClock.utc(hour, minute))
            try SyncWatch.record(nil, in: try world.install.state())  // each probe as a first run
            #expect(try await world.deferred()?.description.contains("play hours") == true, "\(hour):\(minute)")
        }
        #expect(world.nginx.requests().isEmpty)
        world.clock.set(ManualClock.utc(13, 0, day: 24))
        #expect(try await world.deferred() == nil, "13:00 is outside 12:00-13:00, a day later is past the backoff")
    }

    @Test(
        "a metered network defers (NetworkManager's flag or the config's); networkMetered false overrides NetworkManager"
    )
    func metered() async throws {
        var world = try World()
        world.metered = true
        #expect(try await world.deferred()?.description.contains("metered (NetworkManager)") == true)
        let configured = try World { $0.networkMetered = true }
        #expect(try await configured.deferred()?.description.contains("metered (config") == true)
        var overridden = try World { $0.networkMetered = false }
        overridden.metered = true
        #expect(try await overridden.deferred() == nil)
    }

    @Test(
        "backoff: a run before the next attempt exits at once without traffic; delays double to the cap; a completed sync resets it"
    )
    func backoff() async throws {
        let world = try World {
            $0.backoffSeconds = 100
            $0.backoffMaxSeconds = 300
        }
        try world.power.onBattery(true)
        var expected: [TimeInterval] = []
        for _ in 0..<4 {
            let before = world.clock.now()
            _ = try await world.deferred()
            let deferral = try #require(try world.deferral)
            expected.append(deferral.nextAttempt.timeIntervalSince(before))
            world.clock.set(deferral.nextAttempt - 1)
            try world.power.onBattery(false)
            let early = try #require(try await world.deferred())
            #expect(early.description.contains("backing off until"))
            #expect(try world.deferral == deferral, "an early run changes nothing")
            try world.power.onBattery(true)
            world.clock.set(deferral.nextAttempt)
        }
        #expect(expected == [75, 150, 225, 225], "100 → 200 → 300 (cap) → 300, each 3/4 with the fixed jitter")
        #expect(world.nginx.requests().isEmpty)
        try world.power.onBattery(false)
        #expect(try await world.deferred() == nil)
        #expect(try world.deferral == nil, "a completed sync resets the backoff")
    }

    @Test(
        "a deferral recorded while the clock was far ahead does not stop discretionary runs once the clock is corrected"
    )
    func backoffFromAClockAhead() async throws {
        let world = try World {
            $0.backoffSeconds = 100
            $0.backoffMaxSeconds = 300
        }
        let corrected = world.clock.now()
        world.clock.set(corrected + 400 * 86400)  // the clock a year ahead when the run deferred
        try world.power.onBattery(true)
        _ = try await world.deferred()
        #expect(try world.deferral != nil)
        world.clock.set(corrected)
        try world.power.onBattery(false)
        #expect(
            try await world.deferred() == nil,
            "a next attempt further away than the backoff's cap came from a wrong clock")
    }

    @Test(
        "the deadline passing mid-transfer stops the sync (deferred, progress kept, no backoff); the next run finishes")
    func deadline() async throws {
        let world = try World(scale: 0.03, rate: "150k")
        var syncer = world.syncer
        syncer.deadline = world.clock.now() + 3600
        let run = Task { try await world.deferred(syncer) }
        try await Self.waitForChunks(world.install)
        world.clock.advance(by: 3600)
        let error = try #require(try await run.value)
        #expect(error.description.contains("deadline"))
        let kept = try #require(try world.install.status().staging)
        #expect(kept.chunksDone > 0 && kept.chunksDone < kept.chunksTotal)
        #expect(try world.deferral == nil, "a deadline is the scheduler's own limit: no backoff")
        #expect(try await world.deferred() == nil)
        #expect(try world.install.status().ready == "1")
    }

    // The one-second bound is the command line's (DiscretionaryCLITests, TwoAgentsTests): in this
    // process the watch shares the test pool's two threads with suites that block them, and the
    // flush of the chunks in flight waits for a disk the other suites keep busy, so a wall-clock
    // bound here measures the machine. What this test holds is that the sync stops mid-staging.
    @Test("the game starting mid-transfer stops the sync before it finishes, keeping its verified chunks")
    func gameStartsMidTransfer() async throws {
        let world = try World(scale: 0.03, rate: "150k")
        let run = Task { try await world.deferred() }
        try await Self.waitForChunks(world.install)
        let game = try world.install.holdRunningLock()
        let error = try #require(try await run.value)
        #expect(error.description.contains("the game is running"))
        let kept = try #require(try world.install.status().staging)
        #expect(
            kept.chunksDone > 0 && kept.chunksDone < kept.chunksTotal,
            "stopped mid-staging: \(kept.chunksDone) of \(kept.chunksTotal)")
        #expect(try world.install.status().ready == nil)
        #expect(try world.deferral?.reason == .gameRunning)
        withExtendedLifetime(game) {}
    }

    @Test(
        "while yielding, requests ask for at most a quarter second at the current rate (≤ 512 KiB) over at most two connections"
    )
    func shortRequests() async throws {
        let world = try World(
            chunking: ChunkingParameters(minSize: 16 << 10, averageSize: 64 << 10, maxSize: 256 << 10),
            bigFile: 4 << 20)
        #expect(try await world.deferred() == nil)
        let objects = world.nginx.requests().filter { $0.path.contains("/objects/") && $0.status == 206 }
        let largest = try #require(objects.map(\.bodyBytes).max())
        #expect(largest <= 512 << 10, "a response of \(largest) bytes")
        #expect(Set(objects.map(\.connection)).count <= 2)
        // From the starting rate of 1 MiB/s: the first requests ask for about 256 KiB (plus a chunk).
        #expect(objects.prefix(2).allSatisfy { $0.bodyBytes <= (256 + 256) << 10 })

        // A delta pack of about 1.5 MiB (a third of big.bin rewritten) comes in parts of the budget too.
        _ = try world.install.applyPendingUpdate()
        let build2 = world.fixture.directory + "/build-2"
        try FileManager.default.copyItem(atPath: world.fixture.directory + "/build-1", toPath: build2)
        var big = [UInt8](try Data(contentsOf: URL(fileURLWithPath: build2 + "/big.bin")))
        for block in stride(from: 0, to: big.count, by: 128 << 10) {
            for i in block..<min(block + (40 << 10), big.count) { big[i] = UInt8.random(in: 0...255) }
        }
        try FileManager.default.removeItem(atPath: build2 + "/big.bin")
        try Data(big).write(to: URL(fileURLWithPath: build2 + "/big.bin"))
        let report = try world.fixture.publish(
            build2, id: "2",
            chunking: ChunkingParameters(
                minSize: 16 << 10, averageSize: 64 << 10,
                maxSize: 256 << 10))
        let pack = try #require(report.deltas.first)
        #expect(pack.bytes > 1 << 20)
        let before = world.nginx.requests().count
        #expect(try await world.deferred() == nil)
        let parts = world.nginx.requests().dropFirst(before).filter {
            $0.path.contains("/objects/") && $0.status == 206
        }
        #expect(parts.allSatisfy { $0.bodyBytes <= 512 << 10 }, "\(parts.map(\.bodyBytes))")
        #expect(parts.map(\.bodyBytes).reduce(0, +) >= pack.bytes)
    }

    @Test(
        "a running discretionary sync looks for the game on every tick (100 ms), not only on the slower checks' ticks; a plain sync never yields to it",
        .tags(.small), arguments: Array(1...20))
    func gameCheckedEveryTick(tick: Int) throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let power = try PowerSupplies(in: fixture.directory)
        let environment = SyncEnvironment.testing(clock: ManualClock(ManualClock.utc(10)), power: power, metered: false)
        let watch = try SyncWatch(
            install: install, config: try install.config(), environment: environment, deadline: nil,
            discretionary: true, stop: nil)
        #expect(watch.failing(tick: tick) == nil, "nothing holds the sync back before the game starts")
        let game = try install.holdRunningLock()
        #expect(watch.failing(tick: tick)?.reason == .gameRunning, "tick \(tick) did not see the running game")
        let plain = try SyncWatch(
            install: install, config: try install.config(), environment: environment, deadline: nil,
            discretionary: false, stop: nil)
        #expect(plain.failing(tick: tick) == nil)
        withExtendedLifetime(game) {}
    }

    /// Polls until the staging has recorded some chunks (the transfer is under way).
    static func waitForChunks(_ install: Install) async throws {
        if await !Poll.stagingAsync(install) {
            Issue.record("the sync recorded no chunks")
        }
    }
}
