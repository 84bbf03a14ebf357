import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("The conditions of discretionary syncs", .tags(.small))
struct SyncConditionsTests {
    let utc = TimeZone(identifier: "UTC")!

    @Test("play hours hold from start to end, wrap midnight, and refuse what is not a range of times")
    func playHours() throws {
        let hours = try PlayHours(["22:30-01:00", "12:00-13:00"])
        let inside = [(22, 30), (23, 59), (0, 0), (0, 59), (12, 0), (12, 59)]
        let outside = [(22, 29), (1, 0), (11, 59), (13, 0), (18, 0)]
        for (h, m) in inside { #expect(hours.contains(ManualClock.utc(h, m), in: utc), "\(h):\(m)") }
        for (h, m) in outside { #expect(!hours.contains(ManualClock.utc(h, m), in: utc), "\(h):\(m)") }
        for bad in ["18:00", "18:00-18:00", "25:00-26:00", "6pm-11pm", "18:0-19:00"] {
            #expect(throws: PatchSyncError.self, "\(bad)") { try PlayHours([bad]) }
        }
    }

    @Test("--deadline HH:MM is the next time the clock shows it: later today, or tomorrow")
    func nextClockTime() throws {
        let now = ManualClock.utc(10, 0)
        #expect(
            ClockTime.next(minutes: try #require(ClockTime.minutes("06:00")), after: now, in: utc)
                == ManualClock.utc(6, 0, day: 24))
        #expect(
            ClockTime.next(minutes: try #require(ClockTime.minutes("10:30")), after: now, in: utc)
                == ManualClock.utc(10, 30))
    }

    @Test("backoff doubles from its base to its cap, half of each delay fixed and half jitter")
    func backoffDelays() {
        let backoff = Backoff(base: 600, cap: 7200)
        #expect((1...6).map { backoff.delay(after: $0, random: 0) } == [300, 600, 1200, 2400, 3600, 3600])
        #expect(
            (1...6).map { backoff.delay(after: $0, random: 0.999_999).rounded() } == [600, 1200, 2400, 4800, 7200, 7200]
        )
        #expect(backoff.delay(after: 1000, random: 0) == 3600)
    }

    @Test("battery: discharging, or every adapter offline, is on battery; a desktop without one never is")
    func battery() throws {
        let fixture = try Fixture()
        let power = try PowerSupplies(in: fixture.directory)
        var environment = SyncEnvironment.testing(clock: ManualClock(Date()), power: power)
        #expect(!environment.onBattery())
        try power.onBattery(true)
        #expect(environment.onBattery())
        try "Not charging\n".write(toFile: power.root + "/BAT0/status", atomically: true, encoding: .utf8)
        #expect(environment.onBattery(), "adapter offline")
        environment.powerSupplyRoot = fixture.directory + "/none"
        #expect(!environment.onBattery())
    }

    @Test(
        "NetworkManager: a connected device whose metered flag is yes (or guessed yes) is metered; no nmcli, no answer")
    func networkManager() throws {
        let fixture = try Fixture()
        func nmcli(_ output: String) throws -> String {
            let path = fixture.directory + "/nmcli-\(UUID().uuidString)"
            try "#!/bin/sh\ncat <<'END'\n\(output)END\n".write(toFile: path, atomically: true, encoding: .utf8)
            chmod(path, 0o755)
            return path
        }
        let wifi = "GENERAL.STATE:100 (connected)\nGENERAL.METERED:yes (guessed)\n"
        let lo = "GENERAL.STATE:10 (unmanaged)\nGENERAL.METERED:yes\n"
        let wired = "GENERAL.STATE:100 (connected)\nGENERAL.METERED:no\n"
        #expect(NetworkManager.metered(nmcli: try nmcli(wired + "\n" + wifi)) == true)
        #expect(NetworkManager.metered(nmcli: try nmcli(wired + "\n" + lo)) == false, "only connected devices count")
        #expect(NetworkManager.metered(nmcli: try nmcli(lo)) == nil)
        #expect(NetworkManager.metered(nmcli: fixture.directory + "/missing-nmcli") == nil)
    }
}
