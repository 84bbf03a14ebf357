import Foundation
import PatchSyncTestSupport
import Synchronization
import Testing

@testable import PatchSync

/// What a download page sees while bytes stop, as the sync's meter and watch decide it: the watch's
/// ticks stepped with a timeline of instants, two a second (the watch ticks ten times a second); nothing
/// sleeps.
@Suite("Waiting out a network blink", .tags(.small))
struct NetworkBlinkTests {
    let t0 = ContinuousClock.now
    static let refusals = "http://127.0.0.1:1: Failed to connect to 127.0.0.1 port 1 after 0 ms: Connection refused"

    /// A meter whose events are kept, in order, as short names ("stalled 10", "offline", "transfer").
    static func meter() -> (SyncMeter, SyncMeterTests.Events) {
        let events = SyncMeterTests.Events()
        return (SyncMeter(onEvent: { event in events.list.withLock { $0.append(event) } }), events)
    }

    static func names(_ events: SyncMeterTests.Events) -> [String] {
        events.list.withLock { list in
            list.map { event -> String in
                switch event {
                case .stalled(let seconds): return "stalled \(seconds)"
                case .offline: return "offline"
                case .online: return "online"
                case .transfer: return "transfer"
                default: return "other"
                }
            }
        }
    }

    /// The instant of tick `n`, half a second apart.
    func tick(_ n: Int) -> ContinuousClock.Instant { t0 + .milliseconds(500 * n) }

    @Test(
        "an origin that refuses every connection keeps the sync waiting, offline, until --give-up has passed with no byte; then it gives up for the stall (69), naming what each mirror did"
    )
    func refusedOriginWaitsForGiveUp() throws {
        let (meter, events) = Self.meter()
        // tries refused at once and the waits between them: the network is wanted throughout
        meter.requestBegan(now: t0)
        var gaveUp: (tick: Int, quiet: Duration)?
        for n in 1...2400 where gaveUp == nil {
            if n % 6 == 0 { meter.offline(Self.refusals) }  // every try refused again
            if let quiet = meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: tick(n)) {
                gaveUp = (n, quiet)
            }
        }
        let (at, quiet) = try #require(gaveUp, "gave up")
        #expect(at == 120 && quiet == .seconds(60), "gave up \(at / 2) s in, after \(quiet) with no byte")
        let names = Self.names(events)
        #expect(names.filter { $0 == "offline" }.count == 1, "told once while it lasts: \(names)")
        #expect(
            names.filter { $0.hasPrefix("stalled") } == (2...12).map { "stalled \($0 * 5)" },
            "at 10 s, then every 5 s: \(names)")
        let error = SyncWatch.gaveUp(after: quiet, unreachable: meter.unreachable)
        #expect(error.code == .originUnavailable && error.reason == .stalled)
        #expect(error.message.contains("no byte arrived") && error.message.contains(Self.refusals), "\(error.message)")
    }

    @Test(
        "a healthy sync that runs longer than --give-up never gives up: the quiet counts from the last byte, not from the start of the sync; once bytes stop, it gives up --give-up after the last one"
    )
    func healthySyncOutlastsGiveUp() {
        let (meter, events) = Self.meter()
        meter.requestBegan(now: t0)
        var gaveUp: [Int] = []
        for n in 1...2400 {  // twenty minutes, a response's bytes every 2 s
            if n % 4 == 0 { meter.arrived(16 << 10, now: tick(n)) }
            if meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: tick(n)) != nil { gaveUp.append(n) }
        }
        #expect(gaveUp.isEmpty, "gave up \(gaveUp.first.map { $0 / 2 } ?? 0) s into a sync whose bytes kept coming")
        #expect(!Self.names(events).contains { $0.hasPrefix("stalled") })
        for n in 2401...2519 {  // bytes stop after the 2400th tick
            #expect(
                meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: tick(n)) == nil,
                "\(n - 2400) ticks after the last byte")
        }
        #expect(meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: tick(2520)) == .seconds(60))
    }

    @Test("by default a `stalled` event comes after 10 s with no byte: not at 9.9 s, at 10 s")
    func stalledAfterTenSeconds() throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: ["http://127.0.0.1:1"])
        let defaults = [
            Syncer(install: install).stallAfter, Syncer(install: install, options: SyncOptions()).stallAfter
        ]
        #expect(defaults == [.seconds(10), .seconds(10)])
        for stallAfter in defaults {
            let (meter, events) = Self.meter()
            meter.requestBegan(now: t0)
            for tenth in 1...99 {
                _ = meter.tick(stallAfter: stallAfter, giveUpAfter: nil, now: t0 + .milliseconds(100 * tenth))
            }
            #expect(Self.names(events).isEmpty, "nothing at 9.9 s of quiet: \(Self.names(events))")
            _ = meter.tick(stallAfter: stallAfter, giveUpAfter: nil, now: t0 + .seconds(10))
            #expect(Self.names(events) == ["stalled 10"])
        }
    }

    @Test(
        "`offline` is said once while no mirror can be reached, `online` at the next tick after a byte (never from the transfer thread), and a second blink is said again"
    )
    func offlineThenOnline() {
        let (meter, events) = Self.meter()
        meter.requestBegan(now: t0)
        meter.offline(Self.refusals)
        meter.offline(Self.refusals)
        #expect(Self.names(events) == ["offline"])
        #expect(meter.unreachable == Self.refusals)
        meter.arrived(100, now: tick(3))
        #expect(Self.names(events) == ["offline"], "nothing from the transfer thread")
        #expect(meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: tick(3)) == nil)
        #expect(Self.names(events) == ["offline", "online"])
        #expect(meter.unreachable == nil)
        _ = meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: tick(4))
        meter.offline(Self.refusals)
        #expect(Self.names(events) == ["offline", "online", "offline"])
    }

    @Test(
        "while bytes stop, the step's counts go out once a second (a heartbeat) until the stall is said; then `stalled` every 5 s, and no transfer event says otherwise"
    )
    func heartbeatWhileBytesStop() {
        let (meter, events) = Self.meter()
        meter.follow(TransferProgress(total: 1 << 20, filesTotal: 1))
        meter.requestBegan(now: t0)
        for n in 1...50 { _ = meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: tick(n)) }
        let names = Self.names(events)
        #expect(Array(names.prefix(9)) == Array(repeating: "transfer", count: 9), "\(names)")
        #expect(Array(names.dropFirst(9)) == ["stalled 10", "stalled 15", "stalled 20", "stalled 25"], "\(names)")
    }

    @Test(
        "a process frozen past --give-up (SIGSTOP, a suspended machine) does not give up as it wakes: the quiet starts again, and --give-up counts from then"
    )
    func frozenProcessStartsTheQuietAgain() {
        let (meter, _) = Self.meter()
        meter.requestBegan(now: t0)
        for n in 1...40 {
            #expect(meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: tick(n)) == nil)
        }
        let woke = tick(40) + .seconds(3600)
        let asleep = tick(40)..<woke
        #expect(
            meter.tick(stallAfter: .seconds(10), giveUpAfter: .seconds(60), asleep: asleep, now: woke) == nil,
            "an hour asleep is no quiet")
        var gaveUp: Duration?
        for n in 1...200 where gaveUp == nil {
            if let quiet = meter.tick(
                stallAfter: .seconds(10), giveUpAfter: .seconds(60), now: woke + .milliseconds(500 * n))
            {
                gaveUp = .milliseconds(500 * n)
                #expect(quiet == .seconds(60))
            }
        }
        #expect(gaveUp == .seconds(60), "gave up \(String(describing: gaveUp)) after waking")
    }

    /// Steps the watch's ticks from `t0` with the network wanted throughout: each tick's own work takes
    /// `work`, then the watch sleeps `sleep`. Returns when the sync gave up (from `t0`) and the quiet then.
    func giveUp(work: Duration, sleep: Duration, frozenAt freeze: Int? = nil, freezing: Duration = .zero) -> (
        at: Duration, quiet: Duration
    )? {
        var quiet = NetworkQuiet(now: t0)
        quiet.began(t0)
        var now = t0
        for n in 1...1000 {
            let sleeps = now
            let woke = sleeps + sleep + (n == freeze ? freezing : .zero)
            now = woke + work
            if let gaveUp = quiet.check(now: now, asleep: sleeps..<woke, giveUpAfter: .seconds(60)).giveUp {
                return (now - t0, gaveUp)
            }
        }
        return nil
    }

    @Test(
        "ticks whose own work takes long (nmcli hanging through a Wi-Fi handover, a blocked pipe) are no frozen process: the sync still gives up at --give-up"
    )
    func slowTicksStillGiveUp() throws {
        let (at, quiet) = try #require(
            giveUp(work: .seconds(6), sleep: .milliseconds(100)), "never gave up: every slow tick restarted the quiet")
        #expect(
            at == .milliseconds(61_000) && quiet == .milliseconds(61_000),
            "gave up at \(at) after \(quiet) with no byte")
    }

    @Test(
        "a sleep of the watch 5 s or longer is a frozen process: the quiet starts again at the wake, and --give-up counts from there"
    )
    func longSleepStartsTheQuietAgain() throws {
        let freeze = 100  // 50 s in, the 100th sleep lasts 6 s longer than asked
        let (at, quiet) = try #require(
            giveUp(work: .zero, sleep: .milliseconds(500), frozenAt: freeze, freezing: .seconds(6)))
        let woke = Duration.milliseconds(500 * freeze) + .seconds(6)
        #expect(
            quiet == .seconds(60) && at - woke == .milliseconds(60_000),
            "gave up \(at - woke) after the wake, after \(quiet) with no byte")
    }
}

/// The same through a whole sync, against ports where nothing listens (connections refused at once). The
/// sync runs as the command line in its own process: in this test process, tests that block the shared
/// thread pool could hold back the watch's ticks, which is this suite's load, not the sync's behaviour.
@Suite("A sync through a network blink", .tags(.medium))
struct NetworkBlinkSyncTests {
    static let mirrors = ["http://127.0.0.1:1", "http://127.0.0.1:9"]

    /// `sync --give-up 3s --json` on an install whose every mirror refuses connections: its error line and
    /// the names of its events.
    static func refusedSync(configure: (inout InstallConfig) -> Void = { _ in }) throws -> (
        error: [String: Any], events: [String]
    ) {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: mirrors, configure: configure)
        let result = try CLI.run(["sync", "--install", install.root, "--json", "--give-up", "3s"])
        let lines = result.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(result.status == 69, "\(result.stdout.suffix(1500)) \(result.stderr)")
        return (lines.last ?? [:], lines.compactMap { $0["event"] as? String })
    }

    @Test(
        "a sync whose every mirror refuses connections waits for them, offline, until --give-up has passed with no byte, then ends 69 for the stall naming each mirror's refusal (it ended once a failure streak was spent, in a second or two)"
    )
    func refusedOriginEndsAtGiveUp() throws {
        let (error, events) = try Self.refusedSync()
        #expect(error["code"] as? String == "originUnavailable" && error["reason"] as? String == "stalled", "\(error)")
        let message = error["error"] as? String ?? ""
        #expect(
            message.contains("no byte arrived") && Self.mirrors.allSatisfy { message.contains($0 + ": ") }, "\(message)"
        )
        #expect(events.filter { $0 == "offline" }.count == 1 && events.contains("stalled"), "\(events)")
    }

    @Test(
        "in a sync, --give-up alone ends the wait for the metadata: mirrors that refuse longer than refreshDeadlineSeconds are waited for until --give-up, and the sync ends for the stall, not the refresh's deadline"
    )
    func refreshDeadlineLeavesTheWaitToGiveUp() throws {
        let (error, _) = try Self.refusedSync { $0.refreshDeadlineSeconds = 1 }
        #expect(
            error["code"] as? String == "originUnavailable" && error["reason"] as? String == "stalled",
            "3 s of no byte: \(error)")
        let message = error["error"] as? String ?? ""
        #expect(message.contains("no byte arrived") && !message.contains("passed its deadline"), "\(message)")
    }
}
