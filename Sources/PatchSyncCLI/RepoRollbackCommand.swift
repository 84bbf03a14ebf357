import ArgumentParser
import Foundation
import PatchSync

struct RepoRollback: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollback", abstract: "Put the previous build back on a channel, as a new sequence.",
        discussion: """
            Players move back at their next sync with every check intact (the sequence still only \
            grows), and their `patchsync status` says why. By default the build before the newest that \
            no earlier rollback left; --to names one.

            Example:
              patchsync repo rollback --channel live --reason "crash on start with old saves" --origin out/ \\
                --targets-key keys/targets.key --online-key keys/online.key
            """)

    @Option(help: "The channel to roll back.") var channel: String
    @Option(help: "The build id to go back to (default: the previous one).") var to: String?
    @Option(help: "Why, shown to players by `patchsync status`.") var reason: String?
    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @OptionGroup var originWait: OriginWait
    @OptionGroup var signing: TargetsSigning
    @Option(
        help:
            "The folder of preload content keys, to list the channel's pending preloads again above the build (default: the folder a preload publish recorded, else content/ beside the targets key)."
    )
    var contentKeys: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let signers = try signing.signers()
        let report = try await originWait.open(origin, purpose: "rolling back \(channel)", json: json) { folder in
            var release = Release(origin: folder, signers: signers)
            release.contentKeys = contentKeyFolder(contentKeys, origin: folder, beside: signing.targetsKey.first ?? ".")
            return try release.rollback(
                channel: try Channel(channel), to: try to.map { t throws(PatchSyncError) in try BuildID(t) },
                reason: reason)
        }
        warn(report.warnings)
        Output(json: json).result(
            report,
            human: "channel \(report.channel) is back on build \(report.buildId) (sequence "
                + "\(report.sequence)), from \(report.rollback?.from ?? "?"); players move back at their next sync")
    }
}
