import ArgumentParser
import Foundation
import PatchSync

struct RepoPromote: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "promote",
        abstract: "List a tested build of one channel as the newest of another (no re-chunking).",
        discussion: """
            Writes one manifest, the same files and objects with the new channel and sequence, with delta \
            packs from the target channel's latest builds (its players patch as after a publish there), \
            and signs new targets. Run again, it changes nothing. A pending preload of the target channel \
            is listed again above it (its content key from --content-keys), so players still get it at \
            its release.

            Example:
              patchsync repo promote 1.4.2+873 --from beta --to live --origin out/ \\
                --targets-key keys/targets.key --online-key keys/online.key
            """)

    @Argument(help: "The build id to promote.") var buildId: String
    @Option(help: "The channel that lists it.") var from: String
    @Option(help: "The channel to list it on.") var to: String
    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @OptionGroup var originWait: OriginWait
    @OptionGroup var signing: TargetsSigning
    @Option(
        help:
            "The folder of preload content keys, to list the channel's pending preloads again above the build (default: the folder a preload publish recorded, else content/ beside the targets key)."
    )
    var contentKeys: String?
    @Option(help: "How many builds of each channel targets.json keeps listed.") var keepBuilds = Publisher.Options
        .defaultKeepBuilds
    @Flag(help: "List it on a new channel whose name is close to an existing one (refused otherwise, as a typo).")
    var newChannel = false
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let signers = try signing.signers()
        let report = try await originWait.open(origin, purpose: "promoting \(buildId)", json: json) { folder in
            var release = Release(origin: folder, signers: signers)
            release.keepBuilds = keepBuilds
            release.newChannel = newChannel
            release.contentKeys = contentKeyFolder(contentKeys, origin: folder, beside: signing.targetsKey.first ?? ".")
            return try release.promote(try BuildID(buildId), from: try Channel(from), to: try Channel(to))
        }
        warn(report.warnings)
        Output(json: json).result(
            report,
            human: report.alreadyCurrent
                ? "build \(report.buildId) is already the newest on \(report.channel); nothing written"
                : "build \(report.buildId) of \(from) is now the newest on \(report.channel) (sequence \(report.sequence)); "
                    + "players on \(report.channel) get it at their next sync"
                    + (report.deltas.isEmpty
                        ? ""
                        : ", with deltas from "
                            + report.deltas.map { "\($0.from) (\($0.files) files)" }.joined(separator: ", ")))
    }
}
