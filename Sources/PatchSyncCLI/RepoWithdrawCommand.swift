import ArgumentParser
import Foundation
import PatchSync

struct RepoWithdraw: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "withdraw", abstract: "Take a build off its channel without reading its manifest.",
        discussion: """
            For a build that must not reach more players, or one clients refuse (`repo check` names \
            those). When it is the channel's current build, the newest earlier build that clients accept \
            is listed again with a new sequence, as `repo rollback` does, and players move back to it at \
            their next sync. A pending preload is simply no longer listed. Its content stays in the \
            origin until `repo prune` removes it after the grace period.

            Example:
              patchsync repo withdraw 1.5.0 --reason "two files differ only in case" --origin out/ \\
                --targets-key keys/targets.key --online-key keys/online.key
            """)

    @Argument(help: "The build id to take off.") var buildId: String
    @Option(help: "The channel (needed only when the build id is listed on several).") var channel: String?
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
        let report = try await originWait.open(origin, purpose: "withdrawing \(buildId)", json: json) { folder in
            var release = Release(origin: folder, signers: signers)
            release.contentKeys = contentKeyFolder(contentKeys, origin: folder, beside: signing.targetsKey.first ?? ".")
            return try release.withdraw(
                try BuildID(buildId), channel: try channel.map { c throws(PatchSyncError) in try Channel(c) },
                reason: reason)
        }
        warn(report.warnings)
        let human: String
        if report.wasPreload {
            human = "preload \(report.buildId) of \(report.channel) is no longer listed; its key was never released"
        } else if let relisted = report.relisted {
            human =
                "build \(report.buildId) is off \(report.channel), which is back on build \(relisted) (sequence "
                + "\(report.sequence ?? 0)); players move to it at their next sync"
        } else {
            human = "build \(report.buildId) is no longer listed on \(report.channel)"
        }
        Output(json: json).result(report, human: human)
    }
}
