import ArgumentParser
import Foundation
import PatchSync
import Synchronization

/// Where a command's results go: human lines, or JSON lines with `--json`.
///
/// Every JSON line follows manifests/events.schema.json: it has `event` (what the line is: a progress
/// event, `result` last on success, `error` last on failure), `time` (ISO 8601, UTC, milliseconds) and
/// `phase` (the step of the command it comes from, a stable id), and a result names its `command`.
struct Output: Sendable {
    let json: Bool

    /// The command running and the phase it is in, for the lines that follow.
    /// The time lines say while an event recorded earlier is shown (`sync --attach`); nil: now.
    private static let eventTime = Mutex<Date?>(nil)

    /// Runs `body` with the lines it prints stamped `time` (nil: now).
    static func at<T>(_ time: Date?, _ body: () -> T) -> T {
        eventTime.withLock { $0 = time }
        defer { eventTime.withLock { $0 = nil } }
        return body()
    }

    private static let context = Mutex<(command: String, phase: String, fd: Int32)>(
        ("patchsync", "starting", STDOUT_FILENO))

    /// The command's name as typed ("sync", "repo promote").
    static func begin(command: String) { context.withLock { $0.command = command } }

    /// The phase the next lines come from.
    static func enter(_ phase: String) { context.withLock { $0.phase = phase } }

    static var phase: String { context.withLock { $0.phase } }

    /// Prints the final result: `human` for people, `value` as a `result` line.
    func result<T: Encodable>(_ value: T, human: String) {
        if json { Self.line(Self.stamped(value, event: "result", phase: "done")) } else { print(human) }
    }

    /// `value`'s JSON object with the keys every line has: `event`, `time`, `phase` (and `command` on a result).
    static func stamped<T: Encodable>(_ value: T, event: String? = nil, phase: String? = nil) -> String {
        let body = encode(value)
        let (command, current) = context.withLock { ($0.command, $0.phase) }
        var keys = [
            "\"time\":" + encode(timestamp(eventTime.withLock { $0 } ?? Date())),
            "\"phase\":" + encode(phase ?? current)
        ]
        if let event { keys.insert("\"event\":" + encode(event), at: 0) }
        if event == "result" || event == "error" { keys.append("\"command\":" + encode(command)) }
        guard body.hasPrefix("{") else { return "{" + keys.joined(separator: ",") + ",\"value\":" + body + "}" }
        let rest = body.dropFirst()
        return "{" + keys.joined(separator: ",") + (rest == "}" ? "" : ",") + rest
    }

    /// Now, as the lines say it.
    static func timestamp(_ date: Date = Date()) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    /// A progress line: to stderr for people, a JSON event line on stdout with --json
    /// (the shape of manifests/events.schema.json).
    /// Prints one line of JSON and flushes it: a launcher reading `--json` through a pipe sees each
    /// event as it happens, not when the buffer fills or the process ends.
    static func line(_ text: String) {
        let fd = context.withLock { $0.fd }
        if fd == STDOUT_FILENO {
            print(text)
            fflush(nil)
        } else {
            let data = Array((text + "\n").utf8)
            _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        }
    }

    /// JSON lines go to `fd` from now on (launch: the game owns stdout).
    static func send(to fd: Int32) { context.withLock { $0.fd = fd } }

    func event(_ event: ProgressEvent) {
        if json {
            Self.line(Self.stamped(event))
        } else {
            FileHandle.standardError.write(Data((event.message + "\n").utf8))
        }
    }

    /// Prints an error as `error:`/`hint:` lines, or a JSON error object with --json.
    func failure(_ error: PatchSyncError, exitStatus: Int32) {
        if json {
            struct ErrorObject: Encodable {
                var error: String, code: String, hint: String?, exitStatus: Int32
                var reason: PatchSyncError.Reason?
                var requiredBytes: Int64?, availableBytes: Int64?
            }
            Self.line(
                Self.stamped(
                    ErrorObject(
                        error: error.description, code: error.code.rawValue, hint: error.remedy,
                        exitStatus: exitStatus, reason: error.reason, requiredBytes: error.requiredBytes,
                        availableBytes: error.availableBytes), event: "error"))
        } else {
            var text = "error: \(error.description)\n"
            if let remedy = error.remedy { text += "hint: \(remedy)\n" }
            FileHandle.standardError.write(Data(text.utf8))
        }
    }

    static func encode<T: Encodable>(_ value: T) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        guard let data = try? encoder.encode(value) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}

/// Prints each warning as a `warning:` line on stderr (with or without --json: stdout stays the result).
func warn(_ warnings: [String]) {
    for line in warnings { FileHandle.standardError.write(Data("warning: \(line)\n".utf8)) }
}

/// Rates for --max-rate, beside the library's byte counts.
extension ByteCount {
    /// Parses a rate such as 500K, 2M or 1.5G (binary multiples) or plain bytes per second.
    static func parseRate(_ text: String) throws -> Int {
        let trimmed = text.trimmingCharacters(in: .whitespaces).uppercased()
        let multipliers: [Character: Double] = ["K": 1024, "M": 1024 * 1024, "G": 1024 * 1024 * 1024]
        var number = Substring(trimmed)
        var multiplier = 1.0
        if let last = number.last, let m = multipliers[last] {
            multiplier = m
            number = number.dropLast()
        }
        guard let value = Double(number), value > 0, value * multiplier < Double(Int.max) else {
            throw ValidationError("--max-rate \(text) is not a rate: give bytes per second such as 500K, 2M or 1.5G")
        }
        return Int(value * multiplier)
    }
}
