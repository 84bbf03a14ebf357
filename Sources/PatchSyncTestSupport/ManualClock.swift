import Foundation
import PatchSync
import Synchronization

/// A clock that moves only when a test moves it, for conditions, deadlines and backoff.
public final class ManualClock: Sendable {
    private let current: Mutex<Date>
    private let start: Date
    private let base = ContinuousClock.now

    public init(_ start: Date) {
        current = Mutex(start)
        self.start = start
    }

    /// The clock's time as an instant of the continuous clock (for what measures durations).
    public func instant() -> ContinuousClock.Instant { base + .seconds(now().timeIntervalSince(start)) }

    public func now() -> Date { current.withLock { $0 } }

    public func advance(by seconds: TimeInterval) { current.withLock { $0 += seconds } }

    public func set(_ date: Date) { current.withLock { $0 = date } }

    /// A date today (UTC) at `hour`:`minute`.
    public static func utc(_ hour: Int, _ minute: Int = 0, day: Int = 23) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar.date(from: DateComponents(year: 2026, month: 11, day: day, hour: hour, minute: minute))!
    }
}

/// A /sys/class/power_supply look-alike that tests switch between mains and battery.
public final class PowerSupplies: Sendable {
    public let root: String

    /// A laptop: AC adapter "AC" and battery "BAT0", on mains.
    public init(in directory: String) throws {
        root = directory + "/power_supply"
        try FileManager.default.createDirectory(atPath: root + "/AC", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/BAT0", withIntermediateDirectories: true)
        try "Mains\n".write(toFile: root + "/AC/type", atomically: true, encoding: .utf8)
        try "Battery\n".write(toFile: root + "/BAT0/type", atomically: true, encoding: .utf8)
        try "1\n".write(toFile: root + "/BAT0/present", atomically: true, encoding: .utf8)
        try onBattery(false)
    }

    /// Unplugs (true) or plugs in the adapter, as the kernel reports it.
    public func onBattery(_ unplugged: Bool) throws {
        try (unplugged ? "0\n" : "1\n").write(toFile: root + "/AC/online", atomically: true, encoding: .utf8)
        try (unplugged ? "Discharging\n" : "Charging\n").write(
            toFile: root + "/BAT0/status", atomically: true, encoding: .utf8)
    }
}

extension SyncEnvironment {
    /// An environment for tests: `clock`'s time in UTC, `power`'s supplies, a network whose
    /// metered flag is `metered`, and jitter fixed at `random`.
    public static func testing(
        clock: ManualClock, power: PowerSupplies, metered: Bool? = false,
        random: Double = 0.5
    ) -> SyncEnvironment {
        SyncEnvironment(
            now: { clock.now() }, timeZone: TimeZone(identifier: "UTC")!, powerSupplyRoot: power.root,
            networkIsMetered: { metered }, random: { random })
    }
}
