import ArgumentParser
import Foundation
import PatchSync

struct RepoStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "List a repository's channels, builds, sizes and every role's expiry.",
        discussion: "Example:\n  patchsync repo status --origin out/ --json")

    @Option(help: "The origin folder.") var origin: String
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let repo = try Repository.load(origin: origin)
        let status = try repo.status()
        var lines = ["repository \(origin)"]
        for role in status.roles {
            lines.append(
                "  \(role.role.padding(toLength: 9, withPad: " ", startingAt: 0)) version \(role.version), "
                    + "\(role.threshold) of \(role.keys) key(s), expires \(Self.day(role.expires)) (in \(role.daysLeft) days)")
        }
        for channel in status.channels {
            lines.append("channel \(channel.channel): \(channel.builds.count) build(s)")
            for build in channel.builds {
                var line =
                    "  \(build.current ? "*" : " ") \(build.buildId)  sequence \(build.sequence), "
                    + (build.releaseAt == nil ? "\(build.files) files, " : "") + ByteCount.format(build.size)
                if let at = build.releaseAt {
                    line += build.released == true ? ", preload, released" : ", preload, sealed until \(TUFDate.format(at))"
                }
                if let from = build.promotedFrom { line += ", promoted from \(from)" }
                if let note = build.rollback { line += ", rolled back from \(note.from)" + (note.reason.map { ": \($0)" } ?? "") }
                lines.append(line)
            }
        }
        warn(repo.expiryWarnings())
        Output(json: json).result(status, human: lines.joined(separator: "\n"))
    }

    static func day(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withFullDate]
        return formatter.string(from: date)
    }
}
