import Foundation
import PatchSync

/// Parses "365d", "12h", "30m", "90s" or plain seconds; zero only where `allowZero` (a grace of none).
func parseDuration(_ text: String, allowZero: Bool = false) throws(PatchSyncError) -> TimeInterval {
    let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
    let unit = text.last.flatMap { units[$0] }
    let number = Double(unit == nil ? text : String(text.dropLast()))
    guard let number, number.isFinite, number > 0 || (allowZero && number == 0) else {
        throw PatchSyncError(
            .usage, "'\(text)' is not a duration" + (allowZero ? "" : " longer than zero"),
            remedy: "write it as 365d, 12h, 30m, 90s or seconds")
    }
    return number * (unit ?? 1)
}

/// A duration as `parseDuration` reads it: whole days, hours, minutes, else seconds (7d, 12h, 0s).
func formatDuration(_ seconds: Int64) -> String {
    for (unit, size) in [("d", Int64(86400)), ("h", 3600), ("m", 60)] where seconds >= size && seconds % size == 0 {
        return "\(seconds / size)\(unit)"
    }
    return "\(seconds)s"
}
