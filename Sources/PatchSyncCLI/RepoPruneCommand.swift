import ArgumentParser
import Foundation
import PatchSync

struct RepoPrune: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Remove what no build a client could still ask for needs (objects, packs, manifests, old metadata).",
        discussion: """
            Keeps the newest --keep builds of each channel listed (targets.json is signed again without \
            the others, which needs --targets-key and --online-key) and everything those builds need. \
            A build that any targets version of the last --grace listed keeps its content too: a client \
            that read that version may still be fetching it. Root versions are never removed. \
            --dry-run lists what would go and the bytes it would free.

            Examples:
              patchsync repo prune --origin out/ --keep 10 --dry-run
              patchsync repo prune --origin out/ --keep 10 --grace 7d \\
                --targets-key keys/targets.key --online-key keys/online.key --bucket s3://game-cdn/forest
            """)

    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @OptionGroup var originWait: OriginWait
    @Option(help: "How many builds of each channel stay listed and installable.") var keep: Int
    @Option(help: "How long content stays after the last metadata that listed it went (7d, 12h, 0).") var grace:
        String = "7d"
    @Option(help: "A targets key file (repeat up to the targets threshold), when builds are to be unlisted.")
    var targetsKey: [String] = []
    @Option(help: "The online key file, when builds are to be unlisted.") var onlineKey: String?
    @Option(
        help: "A bucket serving this origin (s3://BUCKET/PREFIX): it is brought up to date, then pruned the same way.")
    var bucket: String?
    @Flag(help: "Only report what would be removed.") var dryRun = false
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try OriginWait.refuseBucket(bucket, with: origin)
        var options = Pruner.Options(keep: keep)
        options.grace = try parseDuration(grace, allowZero: true)
        options.dryRun = dryRun
        let signers = try onlineKey.map { (path) throws(PatchSyncError) in
            Repository.Signers(targets: try loadKeys(targetsKey), online: try SigningKey.load(path: path))
        }
        var uploads = Uploader.Options()
        uploads.connections = max(1, originWait.store.connections)
        let uploader = try bucket.map { (url) throws(PatchSyncError) in
            Uploader(origin: origin, bucket: try originWait.store.bucket(url), options: uploads)
        }
        // The bucket first (its metadata brought up to date, then the same deletions), so that a prune
        // stopped half way still knows from the folder what is left to remove there.
        // What the bucket serves now counts as current, however late it was uploaded.
        options.served = try uploader?.servedVersions()
        let removed = Removed()
        var report = try await originWait.open(
            origin, purpose: "pruning", writes: !dryRun, json: json, deleting: { removed.paths }
        ) { folder in
            try Pruner(origin: folder, options: options, signers: signers).run {
                (repo, removals) throws(PatchSyncError) in
                removed.paths = removals.map(\.path)
                guard let uploader else { return }
                let paths = removals.map(\.path)
                _ = try uploader.run(repo: repo, skipping: Set(paths))
                _ = try uploader.delete(paths)
            }
        }
        report.origin = origin
        warn(report.warnings)
        Output(json: json).result(report, human: Self.human(report))
    }

    static func human(_ r: Pruner.Report) -> String {
        var lines = ["\(r.origin): \(r.listed.count) build(s) listed"]
        if !r.unlisted.isEmpty { lines.append("no longer listed: \(r.unlisted.joined(separator: ", "))") }
        if !r.held.isEmpty {
            let grace = formatDuration(r.graceSeconds)
            lines.append(
                "held for the grace period: \(r.held.joined(separator: ", ")) (a player that read metadata listing them "
                    + "in the last \(grace) may still be fetching them; a prune once \(grace) have passed since frees them)"
            )
        }
        let what =
            "\(r.count(.object)) object(s), \(r.count(.manifest)) manifest(s), \(r.count(.metadata)) metadata version(s)"
            + (r.count(.incoming) > 0 ? ", \(r.count(.incoming)) leftover(s) of stopped publishes" : "")
        lines.append(
            (r.dryRun ? "would remove " : "removed ") + what + ": " + ByteCount.format(r.bytesFreed)
                + (r.dryRun ? " would be freed" : " freed"))
        return lines.joined(separator: "\n")
    }
}

/// The files a prune of a bucket removed, for its session to delete from the bucket once committed.
private final class Removed: @unchecked Sendable {
    var paths: [String] = []
}
