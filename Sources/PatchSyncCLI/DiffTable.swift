import Foundation
import PatchSync

/// The human table of a diff.
enum DiffTable {
    static func render(_ r: PatchDiff) -> String {
        var lines = [
            "patch \(r.old) → \(r.new)" + (r.selection.map { " for bundles " + $0.joined(separator: ", ") } ?? ""), ""
        ]
        let header = [
            "bundle", "added", "removed", "changed", "by delta", "unchanged", "download", "written", "disk change"
        ]
        var rows = r.bundles.sorted { $0.key < $1.key }.map { row($0.key, $0.value) }
        rows.append(row("total", r.total))
        let widths = header.indices.map { i in ([header[i]] + rows.map { $0[i] }).map(\.count).max() ?? 0 }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { i, c in
                i == 0
                    ? c.padding(toLength: widths[i], withPad: " ", startingAt: 0)
                    : String(repeating: " ", count: widths[i] - c.count) + c
            }.joined(separator: "  ")
        }
        lines.append(line(header))
        lines += rows.map(line)
        if let metadata = r.metadataBytes {
            lines += [
                "",
                "before the content: \(ByteCount.format(metadata)) of manifest and signed metadata; "
                    + "\(ByteCount.format(r.allDownloadBytes)) in all"
            ]
        }
        if !r.entries.isEmpty {
            lines += [
                "",
                "links and empty folders added or changed: " + r.entries.prefix(10).joined(separator: ", ")
                    + (r.entries.count > 10 ? " and \(r.entries.count - 10) more" : "")
            ]
        }
        if !r.largest.isEmpty {
            lines += ["", "largest downloads:"]
            for f in r.largest {
                lines.append(
                    "  \(ByteCount.format(f.downloadBytes).padding(toLength: 10, withPad: " ", startingAt: 0)) "
                        + "\(f.path) (\(f.change.rawValue)\(f.route == .delta ? " by delta" : f.route == .link ? ", held elsewhere: linked" : ""); reused \(ByteCount.format(f.reusedBytes)), "
                        + "new \(ByteCount.format(f.newBytes)))")
            }
        }
        if !r.removed.isEmpty {
            lines += [
                "",
                "removed: " + r.removed.prefix(10).joined(separator: ", ")
                    + (r.removed.count > 10 ? " and \(r.removed.count - 10) more" : "")
            ]
        }
        if let budget = r.budget { lines += ["", budget.verdict] }
        return lines.joined(separator: "\n")
    }

    private static func row(_ name: String, _ t: PatchDiff.Totals) -> [String] {
        let delta =
            t.diskDeltaBytes < 0 ? "-" + ByteCount.format(-t.diskDeltaBytes) : "+" + ByteCount.format(t.diskDeltaBytes)
        return [
            name, "\(t.filesAdded)", "\(t.filesRemoved)", "\(t.filesChanged)", "\(t.filesPatched)",
            "\(t.filesUnchanged)",
            ByteCount.format(t.downloadBytes), ByteCount.format(t.writtenBytes), delta
        ]
    }
}
