import ArgumentParser
import Foundation
import PatchSync

struct Diff: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "What a patch from OLD to NEW costs players, per bundle and per file.",
        discussion: """
            OLD and NEW are each a manifest file, a build folder (chunked on the fly, nothing \
            published), an install (its current build), or an origin URL verified through --root \
            (URL#BUILD for a given build, else the channel's newest; URL#BUILD@CHANNEL for one of another \
            channel: with a file:// origin, the delta packs `repo promote` would write). Download bytes are what a \
            player on OLD fetches: the compressed chunks NEW needs that OLD lacks, each once, and \
            for a changed file that a delta pack from OLD rebuilds, its share of the pack instead \
            (route delta); a file whose bytes an install holds at another path, or in a build it keeps, \
            is linked (route link), and chunks it holds in any file are copied, as its sync plans it. The pack is the one NEW's origin has from OLD; for a build folder NEW, \
            the one publish would write, computed here when OLD is a build folder or a file:// \
            origin's build among the channel's latest --delta-sources; for a build folder NEW the \
            manifest (or its delta) and signed metadata a player fetches first are predicted too \
            (metadataBytes) and count toward a total --budget. Written bytes are what staging writes (unchanged \
            files are hard links). --bundle NAME (repeatable) or --required-only costs a player who \
            chose those optional bundles: per bundle, and in the total. --budget stops a pipeline (exit 65) when the patch is too big: \
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
    @Option(
        help: ArgumentHelp("For build folders: leave out what matches, as publish --exclude does.", valueName: "glob"))
    var exclude: [String] = []
    @Option(help: ArgumentHelp("For build folders: the globs of this file, one a line.", valueName: "file"))
    var excludeFrom: [String] = []
    @Option(
        name: .customLong("bundle"),
        help: "Cost a player's selection: an optional bundle they install; repeat for more (default: every bundle).")
    var selected: [String] = []
    @Flag(help: "Cost an install of the required bundles only.") var requiredOnly = false
    @Option(help: "A download budget: SIZE for the total, or BUNDLE=SIZE; repeatable.") var budget: [String] = []
    @Option(help: "Also write a self-contained HTML report to this file.") var html: String?
    @Option(
        help:
            "As publish's: how many of the channel's latest builds get a delta pack to a build folder NEW (0: none, chunks only)."
    )
    var deltaSources = 2
    @Flag(help: "Print the report as JSON.") var json = false

    func run() async throws {
        let rules =
            try bundles.map { (path) throws(PatchSyncError) in try BundleRules.load(path: path) }
            ?? BundleRules(bundles: [.base])
        let budgets = try Budget.parse(budget)
        guard deltaSources >= 0 else {
            throw PatchSyncError(
                .usage, "--delta-sources \(deltaSources) is negative", remedy: "give 0 (no deltas) or more")
        }
        let exclusions = try ExcludeRules(
            exclude + excludeFrom.flatMap { (file) throws(PatchSyncError) in try ExcludeRules.globs(inFile: file) })
        let before = try await DiffSide.load(
            old, root: root, channel: channel, bundles: rules, deltaSources: deltaSources, exclude: exclusions)
        let after = try await DiffSide.load(
            new, root: root, channel: channel, bundles: rules, deltaSources: deltaSources, exclude: exclusions)
        let deltas = try await DiffSide.deltaShares(from: before, to: after)
        // A selection: what its player has and fetches (an install's own selection is already applied).
        let chosen: [String]? = requiredOnly || !selected.isEmpty ? selected : nil
        var report = PatchDiff(from: before, to: after, deltas: deltas, chosen: chosen)
        report.metadataBytes = try DiffSide.predictedMetadataBytes(
            from: before, to: after,
            packBytes: deltas.values.reduce(0, +))
        report.budget = budgets.verdict(report)
        if let html {
            do { try Data(DiffHTML.render(report).utf8).write(to: URL(fileURLWithPath: html)) } catch {
                throw PatchSyncError(
                    .localIO, "writing \(html)", remedy: "check that its folder exists and is writable",
                    cause: error)
            }
        }
        Output(json: json).result(report, human: DiffTable.render(report))
        if let overrun = budgets.overrun(report) { throw overrun }
    }
}
