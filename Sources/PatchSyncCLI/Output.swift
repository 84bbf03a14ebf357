import ArgumentParser
import Foundation
import PatchSync

/// Where a command's results go: human lines, or one JSON object (events one per line) with `--json`.
struct Output: Sendable {
    let json: Bool

    /// Prints the final result: `human` for people, `value` as JSON.
    func result<T: Encodable>(_ value: T, human: String) {
        if json { print(Self.encode(value)) } else { print(human) }
    }

    /// A progress line: to stderr for people, a JSON event line on stdout with --json
    /// (the shape of manifests/events.schema.json).
    /// Prints one line of JSON and flushes it: a launcher reading `--json` through a pipe sees each
    /// event as it happens, not when the buffer fills or the process ends.
    static func line(_ text: String) {
        print(text)
        fflush(nil)
    }

    func event(_ event: ProgressEvent) {
        if json { Self.line(Self.encode(event)) } else { FileHandle.standardError.write(Data((event.message + "\n").utf8)) }
    }

    /// Prints an error as `error:`/`hint:` lines, or a JSON error object with --json.
    func failure(_ error: PatchSyncError, exitStatus: Int32) {
        if json {
            struct ErrorObject: Encodable {
                var error: String, code: String, hint: String?, exitStatus: Int32
            }
            print(
                Self.encode(
                    ErrorObject(
                        error: error.description, code: error.code.rawValue, hint: error.remedy,
                        exitStatus: exitStatus)))
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
