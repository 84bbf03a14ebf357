import Foundation

/// What a sync looks at to decide whether it may run: the clock, the power supply, the network's
/// metered flag. Each part can be pointed elsewhere, by tests and by launchers that know better.
public struct SyncEnvironment: Sendable {
    public var now: @Sendable () -> Date
    public var timeZone: TimeZone
    /// The folder of power supplies (/sys/class/power_supply; `PATCHSYNC_POWER_SUPPLY_ROOT` overrides).
    public var powerSupplyRoot: String
    /// True when the system marks the network metered, nil when it cannot tell.
    public var networkIsMetered: @Sendable () -> Bool?
    /// A number in [0, 1) for the backoff's jitter.
    public var random: @Sendable () -> Double

    /// The machine's clock, time zone, /sys and NetworkManager.
    public static var system: SyncEnvironment {
        let variables = ProcessInfo.processInfo.environment
        let nmcli = variables["PATCHSYNC_NMCLI"] ?? "nmcli"
        return SyncEnvironment(
            now: { Date() }, timeZone: .current,
            powerSupplyRoot: variables["PATCHSYNC_POWER_SUPPLY_ROOT"] ?? "/sys/class/power_supply",
            networkIsMetered: { NetworkManager.metered(nmcli: nmcli) },
            random: { Double.random(in: 0..<1) })
    }

    public init(
        now: @escaping @Sendable () -> Date, timeZone: TimeZone, powerSupplyRoot: String,
        networkIsMetered: @escaping @Sendable () -> Bool?, random: @escaping @Sendable () -> Double
    ) {
        self.now = now
        self.timeZone = timeZone
        self.powerSupplyRoot = powerSupplyRoot
        self.networkIsMetered = networkIsMetered
        self.random = random
    }

    /// True when the machine runs on battery: a battery discharges, or batteries exist and every
    /// mains or USB supply reports offline. A machine without a battery never is.
    func onBattery() -> Bool {
        var batteries = 0, external = 0, online = 0
        for name in (try? FileSystem.list(powerSupplyRoot)) ?? [] {
            let folder = powerSupplyRoot + "/" + name
            let type = Self.read(folder + "/type")
            if type == "Battery" {
                if Self.read(folder + "/present") == "0" { continue }
                batteries += 1
                if Self.read(folder + "/status") == "Discharging" { return true }
            } else if type == "Mains" || type == "USB" {
                external += 1
                if Self.read(folder + "/online") == "1" { online += 1 }
            }
        }
        return batteries > 0 && external > 0 && online == 0
    }

    private static func read(_ path: String) -> String? {
        (try? FileSystem.read(path, limit: 4096)).flatMap { String(data: $0, encoding: .utf8) }?
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// NetworkManager's view of the network, through its command-line client.
enum NetworkManager {
    /// `nmcli -t -f GENERAL.STATE,GENERAL.METERED device show`: true when a connected device's
    /// metered flag is yes (also guessed), false when connected devices are not, nil without nmcli
    /// or a connected device.
    static func metered(nmcli: String) -> Bool? {
        guard
            let output = Subprocess.output(
                nmcli, ["-t", "-f", "GENERAL.STATE,GENERAL.METERED", "device", "show"],
                timeout: 5)
        else { return nil }
        var connected = false, answer: Bool?
        for line in output.split(separator: "\n") {
            if line.hasPrefix("GENERAL.STATE:") { connected = line.contains("(connected)") }
            guard connected, line.hasPrefix("GENERAL.METERED:") else { continue }
            let value = line.dropFirst("GENERAL.METERED:".count)
            if value.hasPrefix("yes") { return true }
            if value.hasPrefix("no") { answer = false }
        }
        return answer
    }
}

/// Local times of day ("18:00-23:30", possibly wrapping midnight) when the player plays.
struct PlayHours: Sendable, Equatable {
    /// Minutes after midnight: start inclusive, end exclusive.
    var ranges: [(start: Int, end: Int)]

    static func == (a: PlayHours, b: PlayHours) -> Bool { a.ranges.elementsEqual(b.ranges) { $0 == $1 } }

    init(_ texts: [String]) throws(PatchSyncError) {
        var ranges: [(Int, Int)] = []
        for text in texts {
            let parts = text.split(separator: "-").map { ClockTime.minutes(String($0)) }
            guard parts.count == 2, let start = parts[0], let end = parts[1], start != end else {
                throw PatchSyncError(
                    .usage, "playHours entry '\(text)' is not a range of local times",
                    remedy: "write it as \"18:00-23:30\" (it may wrap midnight: \"22:00-02:00\")")
            }
            ranges.append((start, end))
        }
        self.ranges = ranges
    }

    func contains(_ date: Date, in zone: TimeZone) -> Bool {
        let minute = ClockTime.minuteOfDay(date, in: zone)
        return ranges.contains { start, end in
            start < end ? (start..<end).contains(minute) : minute >= start || minute < end
        }
    }
}

/// Local times of day, as `--deadline` and `playHours` write them.
public enum ClockTime {
    /// "HH:MM" as minutes after midnight (24:00 is the end of the day).
    public static func minutes(_ text: String) -> Int? {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[1].count == 2, let hour = Int(parts[0]), let minute = Int(parts[1]),
            (0...24).contains(hour), (0..<60).contains(minute), hour * 60 + minute <= 24 * 60
        else { return nil }
        return hour * 60 + minute
    }

    static func minuteOfDay(_ date: Date, in zone: TimeZone) -> Int {
        let parts = calendar(zone).dateComponents([.hour, .minute], from: date)
        return (parts.hour ?? 0) * 60 + (parts.minute ?? 0)
    }

    /// The first time after `date` that the local clock shows `minutes` after midnight.
    public static func next(minutes: Int, after date: Date, in zone: TimeZone) -> Date {
        let components = DateComponents(hour: minutes / 60 % 24, minute: minutes % 60, second: 0)
        return calendar(zone).nextDate(after: date, matching: components, matchingPolicy: .nextTime) ?? date + 86_400
    }

    private static func calendar(_ zone: TimeZone) -> Calendar {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        return calendar
    }
}

/// When a deferred discretionary run may try again: exponential in the number of deferrals in a
/// row, capped, with jitter (half the delay fixed, half random, so agents started together spread).
public struct Backoff: Sendable, Equatable {
    public var base: TimeInterval
    public var cap: TimeInterval

    /// The delay after the `count`-th deferral in a row (1 for the first).
    func delay(after count: Int, random: Double) -> TimeInterval {
        let full = min(cap, base * pow(2, Double(max(0, min(count - 1, 30)))))
        return full / 2 + full / 2 * random
    }
}
