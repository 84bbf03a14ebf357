import ArgumentParser
import Foundation
import PatchSync

struct RepoStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "List a repository's channels, builds, sizes and every role's expiry.",
        discussion: """
            With --bucket, also what the bucket serves players: its timestamp, snapshot and targets \
            versions next to the folder's, and every signed file players may ask for that the bucket \
            lacks (`upload --verify` sends them again). JSON then holds {"repository": …, "bucket": …}.

            Examples:
              patchsync repo status --origin out/ --json
              patchsync repo status --origin out/ --bucket s3://game-cdn/forest --endpoint https://s3.example.com
            """)

    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @Option(help: "A bucket serving this origin (s3://BUCKET/PREFIX): show what players see there.") var bucket: String?
    @OptionGroup var originWait: OriginWait
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try OriginWait.refuseBucket(bucket, with: origin)
        let (repo, status) = try await originWait.open(origin, purpose: "reading", writes: false, json: json) {
            folder in
            let repo = try Repository.load(origin: folder)
            return (repo, try repo.status().named(origin))
        }
        var lines = ["repository \(origin)"]
        for role in status.roles {
            lines.append(
                "  \(role.role.padding(toLength: 9, withPad: " ", startingAt: 0)) version \(role.version), "
                    + "\(role.threshold) of \(role.keys) key(s), expires \(Self.day(role.expires)) (in \(role.daysLeft) days)"
            )
        }
        for channel in status.channels {
            lines.append("channel \(channel.channel): \(channel.builds.count) build(s)")
            for build in channel.builds {
                var line =
                    "  \(build.current ? "*" : " ") \(build.buildId)  sequence \(build.sequence), "
                    + (build.releaseAt == nil || build.released == true ? "\(build.files) files, " : "")
                    + ByteCount.format(build.size)
                if let at = build.releaseAt {
                    line +=
                        build.released == true ? ", preload, released" : ", preload, sealed until \(TUFDate.format(at))"
                }
                if let from = build.promotedFrom { line += ", promoted from \(from)" }
                if let note = build.rollback {
                    line += ", rolled back from \(note.from)" + (note.reason.map { ": \($0)" } ?? "")
                }
                if let published = build.published {
                    line +=
                        "\n      published \(TUFDate.format(published.at)) by \(published.by)"
                        + (published.description.map { ": \($0)" } ?? "")
                }
                lines.append(line)
            }
        }
        warn(repo.expiryWarnings())
        guard let bucket else {
            Output(json: json).result(status, human: lines.joined(separator: "\n"))
            return
        }
        let state = try Uploader(origin: origin, bucket: try originWait.store.bucket(bucket)).inspect()
        lines.append(Self.describe(state))
        struct Both: Encodable {
            var repository: RepositoryStatus
            var bucket: Uploader.BucketState
        }
        Output(json: json).result(Both(repository: status, bucket: state), human: lines.joined(separator: "\n"))
    }

    /// What players see in the bucket, in one paragraph.
    static func describe(_ state: Uploader.BucketState) -> String {
        var text = "bucket \(state.destination): "
        if let served = state.servedTimestamp {
            text += "timestamp version \(served)" + (state.servedTargets.map { ", targets version \($0)" } ?? "")
            text +=
                state.current
                ? ", the same as the folder" : "; the folder is at version \(state.originTimestamp): run upload"
        } else {
            text += "serves nothing yet (no timestamp.json): run upload"
        }
        if !state.missing.isEmpty {
            text +=
                "\n  lacks \(state.missing.count) signed file(s) players may ask for: "
                + state.missing.prefix(5).joined(separator: ", ") + (state.missing.count > 5 ? ", …" : "")
                + "\n  send them again: \(state.repair)"
        }
        return text
    }

    static func day(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate]
        return formatter.string(from: date)
    }
}
