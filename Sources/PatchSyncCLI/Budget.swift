import Foundation
import PatchSync

/// Download budgets for a patch: a total and per bundle.
struct Budget {
    var total: Int64?
    var bundles: [String: Int64] = [:]

    static func parse(_ specs: [String]) throws(PatchSyncError) -> Budget {
        var budget = Budget()
        for spec in specs {
            if let eq = spec.lastIndex(of: "=") {
                budget.bundles[String(spec[..<eq])] = try size(String(spec[spec.index(after: eq)...]))
            } else {
                budget.total = try size(spec)
            }
        }
        return budget
    }

    /// "500M" → 500 MiB; K, M, G, T are powers of 1024; a plain number is bytes. Refuses what is no
    /// size (a word, a negative number, NaN) and a size beyond Int64 bytes (1e30, inf), which would trap
    /// in the conversion.
    static func size(_ text: String) throws(PatchSyncError) -> Int64 {
        let units: [Character: Double] = ["K": 1024, "M": 1_048_576, "G": 1_073_741_824, "T": 1_099_511_627_776]
        let upper = text.uppercased().replacingOccurrences(of: "IB", with: "").replacingOccurrences(of: "B", with: "")
        let unit = upper.last.flatMap { units[$0] }
        guard let number = Double(unit == nil ? upper : String(upper.dropLast())), number >= 0 else {
            throw PatchSyncError(.usage, "'\(text)' is not a size", remedy: "write it as 500M, 2G, 100K or bytes")
        }
        let bytes = number * (unit ?? 1)
        // Double(Int64.max) is 2^63, the first value that does not convert.
        guard bytes.isFinite, bytes < Double(Int64.max) else {
            throw PatchSyncError(
                .usage, "the size '\(text)' is out of range: a budget is at most \(Int64.max) bytes (8 EiB)",
                remedy: "write it as 500M, 2G, 100K or bytes")
        }
        return Int64(bytes)
    }

    /// The verdict on these budgets for `report`; nil when no budget was given.
    func verdict(_ report: PatchDiff) -> PatchDiff.BudgetVerdict? {
        var limits: [PatchDiff.BudgetVerdict.Limit] = []
        if let total {
            limits.append(
                .init(
                    name: "total", limit: total, bytes: report.allDownloadBytes,
                    within: report.allDownloadBytes <= total))
        }
        for (bundle, limit) in bundles.sorted(by: { $0.key < $1.key }) {
            let bytes = report.bundles[bundle]?.downloadBytes ?? 0
            limits.append(.init(name: "bundle \(bundle)", limit: limit, bytes: bytes, within: bytes <= limit))
        }
        return limits.isEmpty ? nil : PatchDiff.BudgetVerdict(limits: limits)
    }

    /// The error that stops a pipeline when the patch exceeds a budget, explaining by how much and why.
    func overrun(_ report: PatchDiff) -> PatchSyncError? {
        var lines: [String] = []
        if let total, report.allDownloadBytes > total {
            lines.append(
                "the patch downloads \(ByteCount.format(report.allDownloadBytes)), over the "
                    + "\(ByteCount.format(total)) budget by \(ByteCount.format(report.allDownloadBytes - total))")
        }
        for (bundle, limit) in bundles.sorted(by: { $0.key < $1.key }) {
            let bytes = report.bundles[bundle]?.downloadBytes ?? 0
            if bytes > limit {
                lines.append(
                    "bundle \(bundle) downloads \(ByteCount.format(bytes)), over its \(ByteCount.format(limit)) budget")
            }
        }
        guard !lines.isEmpty else { return nil }
        let top = report.largest.prefix(3).map { "\($0.path) (\(ByteCount.format($0.downloadBytes)))" }
        return PatchSyncError(
            .refusedData, lines.joined(separator: "; "),
            remedy: "largest contributors: \(top.joined(separator: ", ")); check for a packaging change")
    }
}
