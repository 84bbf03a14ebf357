import Foundation
import PatchSync

/// Parses "365d", "12h", "30m" or plain seconds.
func parseDuration(_ text: String) throws(PatchSyncError) -> TimeInterval {
    let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
    let unit = text.last.flatMap { units[$0] }
    let number = Double(unit == nil ? text : String(text.dropLast()))
    guard let number, number > 0 else {
        throw PatchSyncError(.usage, "'\(text)' is not a duration", remedy: "write it as 365d, 12h, 30m or seconds")
    }
    return number * (unit ?? 1)
}
