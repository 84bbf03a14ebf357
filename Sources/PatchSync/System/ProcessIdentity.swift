import Foundation

/// A process named so that a later process given the same pid is never taken for it: its pid and its
/// start time in clock ticks since boot (field 22 of `/proc/PID/stat`), which a reused pid does not share.
public struct ProcessIdentity: Codable, Sendable, Equatable {
    public var pid: Int32
    /// Nil where `/proc` could not be read: then the pid alone is checked, as before.
    public var startTicks: UInt64?

    /// This process.
    public static var current: ProcessIdentity { ProcessIdentity(pid: getpid(), startTicks: startTicks(of: getpid())) }

    /// Whether the process still runs: its pid answers signal 0 and, when its start time is known, the
    /// process with that pid started then.
    public var isRunning: Bool {
        guard Self.exists(pid) else { return false }
        guard let startTicks, let now = Self.startTicks(of: pid) else { return true }
        return now == startTicks
    }

    /// Whether a process with `pid` exists (it answers signal 0, or exists and belongs to another user):
    /// the library's one liveness check of a bare pid.
    static func exists(_ pid: Int32) -> Bool { kill(pid, 0) == 0 || errno == EPERM }

    /// Field 22 (starttime) of `/proc/PID/stat`, read after the command name's closing parenthesis (a
    /// name may hold spaces and parentheses); nil when it cannot be read.
    static func startTicks(of pid: Int32) -> UInt64? {
        guard let data = try? FileSystem.read("/proc/\(pid)/stat", limit: 4096),
            let text = String(data: data, encoding: .utf8), let close = text.lastIndex(of: ")")
        else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After ")": state is field 3, so starttime (22) is the 20th.
        return fields.count > 19 ? UInt64(fields[19]) : nil
    }
}
