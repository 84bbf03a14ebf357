import ArgumentParser
import Foundation
import PatchSync

struct Diff: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "What a patch from OLD to NEW costs players, per bundle and per file.",
        discussion: """
            OLD and NEW are each a manifest file, a build folder (chunked on the fly, nothing
            published), an install (its current build), or an origin URL verified through --root
            (URL#BUILD for a given build, else the channel's newest). Download bytes are what a
            player on OLD fetches: the compressed chunks NEW needs that OLD lacks, each once, and
            for a changed file that a delta pack from OLD rebuilds, its share of the pack instead
            (route delta). The pack is the one NEW's origin has from OLD; for a build folder NEW,
            the one publish would write, computed here when OLD is a build folder or a file://
            origin's build among the channel's latest --delta-sources; for a build folder NEW the
            manifest (or its delta) and signed metadata a player fetches first are predicted too
            (metadataBytes) and count toward a total --budget. Written bytes are what staging writes (unchanged
            files are hard links). --bundle NAME (repeatable) or --required-only costs a player who
            chose those optional bundles: per bundle, and in the total. --budget stops a pipeline (exit 65) when the patch is too big:
            a total (500M) or per bundle (base=100M); sizes in K, M, G, T (×1024).

            Example:
              patchsync diff https://cdn.example.com/game#1.4.1+870 build/ --root root.json \\
                  --budget 500M --budget maps/forest=50M --html patch.html
            """)

    @Argument(help: "The build players have.") var old: String
    @Argument(help: "The build to ship.") var new: String
    @Option(help: "The trusted root.json, for origin URLs.") var root: String?
    @Option(help: "The channel, for origin URLs.") var channel: String = "live"
    @Option(help: "A bundles file, for build folders.") var bundles: String?
    @Option(name: .customLong("bundle"), help: "Cost a player's selection: an optional bundle they install; repeat for more (default: every bundle).")
    var selected: [String] = []
    @Flag(help: "Cost an install of the required bundles only.") var requiredOnly = false
    @Option(help: "A download budget: SIZE for the total, or BUNDLE=SIZE; repeatable.") var budget: [String] = []
    @Option(help: "Also write a self-contained HTML report to this file.") var html: String?
    @Option(help: "As publish's: how many of the channel's latest builds get a delta pack to a build folder NEW (0: none, chunks only).")
    var deltaSources = 2
    @Flag(help: "Print the report as JSON.") var json = false

    func run() async throws {
        let rules = try bundles.map { (path) throws(PatchSyncError) in try BundleRules.load(path: path) }
            ?? BundleRules(bundles: [.base])
        let budgets = try Budget.parse(budget)
        guard deltaSources >= 0 else {
            throw PatchSyncError(.usage, "--delta-sources \(deltaSources) is negative", remedy: "give 0 (no deltas) or more")
        }
        let before = try await DiffSide.load(old, root: root, channel: channel, bundles: rules, deltaSources: deltaSources)
        let after = try await DiffSide.load(new, root: root, channel: channel, bundles: rules, deltaSources: deltaSources)
        let deltas = try await DiffSide.deltaShares(from: before, to: after)
        // A selection: what its player has and fetches (an install's own selection is already applied).
        let chosen: [String]? = requiredOnly || !selected.isEmpty ? selected : nil
        func pick(_ manifest: Manifest) -> Manifest {
            chosen.map { manifest.selecting(BundleSelection(manifest, chosen: $0).wanted) } ?? manifest
        }
        var report = PatchDiff(old: pick(before.manifest), new: pick(after.manifest), oldName: before.name, newName: after.name,
                               deltas: deltas)
        if let chosen { report.selection = BundleSelection(after.manifest, chosen: chosen).wanted }
        report.metadataBytes = try DiffSide.predictedMetadataBytes(from: before, to: after,
                                                                   packBytes: deltas.values.reduce(0, +))
        if let html {
            do { try Data(DiffHTML.render(report).utf8).write(to: URL(fileURLWithPath: html)) } catch {
                throw PatchSyncError(.localIO, "writing \(html)", remedy: "check that its folder exists and is writable",
                                     cause: error)
            }
        }
        Output(json: json).result(report, human: DiffTable.render(report))
        if let overrun = budgets.overrun(report) { throw overrun }
    }
}

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

    /// "500M" → 500 MiB; K, M, G, T are powers of 1024; a plain number is bytes.
    static func size(_ text: String) throws(PatchSyncError) -> Int64 {
        let units: [Character: Double] = ["K": 1024, "M": 1_048_576, "G": 1_073_741_824, "T": 1_099_511_627_776]
        let upper = text.uppercased().replacingOccurrences(of: "IB", with: "").replacingOccurrences(of: "B", with: "")
        let unit = upper.last.flatMap { units[$0] }
        guard let number = Double(unit == nil ? upper : String(upper.dropLast())), number >= 0 else {
            throw PatchSyncError(.usage, "'\(text)' is not a size", remedy: "write it as 500M, 2G, 100K or bytes")
        }
        return Int64(number * (unit ?? 1))
    }

    /// The error that stops a pipeline when the patch exceeds a budget, explaining by how much and why.
    func overrun(_ report: PatchDiff) -> PatchSyncError? {
        var lines: [String] = []
        if let total, report.allDownloadBytes > total {
            lines.append("the patch downloads \(ByteCount.format(report.allDownloadBytes)), over the "
                         + "\(ByteCount.format(total)) budget by \(ByteCount.format(report.allDownloadBytes - total))")
        }
        for (bundle, limit) in bundles.sorted(by: { $0.key < $1.key }) {
            let bytes = report.bundles[bundle]?.downloadBytes ?? 0
            if bytes > limit {
                lines.append("bundle \(bundle) downloads \(ByteCount.format(bytes)), over its \(ByteCount.format(limit)) budget")
            }
        }
        guard !lines.isEmpty else { return nil }
        let top = report.largest.prefix(3).map { "\($0.path) (\(ByteCount.format($0.downloadBytes)))" }
        return PatchSyncError(.refusedData, lines.joined(separator: "; "),
                              remedy: "largest contributors: \(top.joined(separator: ", ")); check for a packaging change")
    }
}

/// The human table of a diff.
enum DiffTable {
    static func render(_ r: PatchDiff) -> String {
        var lines = ["patch \(r.old) → \(r.new)" + (r.selection.map { " for bundles " + $0.joined(separator: ", ") } ?? ""), ""]
        let header = ["bundle", "added", "removed", "changed", "by delta", "unchanged", "download", "written", "disk change"]
        var rows = r.bundles.sorted { $0.key < $1.key }.map { row($0.key, $0.value) }
        rows.append(row("total", r.total))
        let widths = header.indices.map { i in ([header[i]] + rows.map { $0[i] }).map(\.count).max() ?? 0 }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { i, c in i == 0 ? c.padding(toLength: widths[i], withPad: " ", startingAt: 0)
                : String(repeating: " ", count: widths[i] - c.count) + c }.joined(separator: "  ")
        }
        lines.append(line(header))
        lines += rows.map(line)
        if let metadata = r.metadataBytes {
            lines += ["", "before the content: \(ByteCount.format(metadata)) of manifest and signed metadata; "
                      + "\(ByteCount.format(r.allDownloadBytes)) in all"]
        }
        if !r.entries.isEmpty {
            lines += ["", "links and empty folders added or changed: " + r.entries.prefix(10).joined(separator: ", ")
                      + (r.entries.count > 10 ? " and \(r.entries.count - 10) more" : "")]
        }
        if !r.largest.isEmpty {
            lines += ["", "largest downloads:"]
            for f in r.largest {
                lines.append("  \(ByteCount.format(f.downloadBytes).padding(toLength: 10, withPad: " ", startingAt: 0)) "
                             + "\(f.path) (\(f.change.rawValue)\(f.route == .delta ? " by delta" : ""); reused \(ByteCount.format(f.reusedBytes)), "
                             + "new \(ByteCount.format(f.newBytes)))")
            }
        }
        return lines.joined(separator: "\n")
    }

    private static func row(_ name: String, _ t: PatchDiff.Totals) -> [String] {
        let delta = t.diskDeltaBytes < 0 ? "-" + ByteCount.format(-t.diskDeltaBytes) : "+" + ByteCount.format(t.diskDeltaBytes)
        return [name, "\(t.filesAdded)", "\(t.filesRemoved)", "\(t.filesChanged)", "\(t.filesPatched)", "\(t.filesUnchanged)",
                ByteCount.format(t.downloadBytes), ByteCount.format(t.writtenBytes), delta]
    }
}
