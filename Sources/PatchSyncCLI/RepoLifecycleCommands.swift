import ArgumentParser
import Foundation
import PatchSync

/// Prints each warning as a `warning:` line on stderr (with or without --json: stdout stays the result).
func warn(_ warnings: [String]) {
    for line in warnings { FileHandle.standardError.write(Data("warning: \(line)\n".utf8)) }
}

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
            lines.append("  \(role.role.padding(toLength: 9, withPad: " ", startingAt: 0)) version \(role.version), "
                         + "\(role.threshold) of \(role.keys) key(s), expires \(Self.day(role.expires)) (in \(role.daysLeft) days)")
        }
        for channel in status.channels {
            lines.append("channel \(channel.channel): \(channel.builds.count) build(s)")
            for build in channel.builds {
                var line = "  \(build.current ? "*" : " ") \(build.buildId)  sequence \(build.sequence), "
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

struct RepoCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check", abstract: "Exit 65 when a role of the repository expires soon (for monitoring).",
        discussion: """
            Root and targets are renewed by hand (`repo renew`): they count when they expire within
            --within. Snapshot and timestamp are re-signed by the `repo refresh` cron job: they count when
            less than --online-within is left, which means the job has stopped. Each one found is printed
            with the command that renews it. Exit status: 0 nothing due, 65 something due or expired.

            Example (a daily monitoring job):
              patchsync repo check --origin out/ --within 30d || mail -s "renew the game's metadata" ops@example.com
            """)

    @Option(help: "The origin folder.") var origin: String
    @Option(help: "How far ahead to look for root and targets (30d, 12h, …).") var within: String = "30d"
    @Option(help: "The least lifetime snapshot and timestamp may have left.") var onlineWithin: String = "2d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let repo = try Repository.load(origin: origin)
        let due = repo.expiring(within: try parseDuration(within), onlineWithin: try parseDuration(onlineWithin))
        struct Result: Encodable { var origin: String; var ok: Bool; var due: [RepositoryStatus.Role] }
        let output = Output(json: json)
        guard due.isEmpty else {
            if json { output.result(Result(origin: origin, ok: false, due: due), human: "") }
            let names = due.map { "\($0.role) (\($0.daysLeft <= 0 ? "expired" : "\($0.daysLeft) days left"))" }
            throw PatchSyncError(.refusedData, "\(origin): \(names.joined(separator: ", ")) must be signed again soon, "
                                 + "or clients will refuse every update",
                                 remedy: due.map(\.renewal).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
                                    .joined(separator: "; "))
        }
        output.result(Result(origin: origin, ok: true, due: []),
                      human: "\(origin): no role expires within \(within) (snapshot and timestamp: \(onlineWithin))")
    }
}

/// The keys a change of targets is signed with: the targets keys and the online key.
struct TargetsSigning: ParsableArguments {
    @Option(help: "A targets key file (repeat up to the targets threshold).") var targetsKey: [String] = []
    @Option(help: "The online key file (signs snapshot and timestamp).") var onlineKey: String

    func signers() throws(PatchSyncError) -> Repository.Signers {
        Repository.Signers(targets: try loadKeys(targetsKey), online: try SigningKey.load(path: onlineKey))
    }
}

struct RepoPromote: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "promote", abstract: "List a tested build of one channel as the newest of another (no re-chunking).",
        discussion: """
            Writes one manifest, the same files and objects with the new channel and sequence, and signs
            new targets. Run again, it changes nothing.

            Example:
              patchsync repo promote 1.4.2+873 --from beta --to live --origin out/ \\
                --targets-key keys/targets.key --online-key keys/online.key
            """)

    @Argument(help: "The build id to promote.") var buildId: String
    @Option(help: "The channel that lists it.") var from: String
    @Option(help: "The channel to list it on.") var to: String
    @Option(help: "The origin folder.") var origin: String
    @OptionGroup var signing: TargetsSigning
    @Option(help: "How many builds of each channel targets.json keeps listed.") var keepBuilds = Publisher.Options.defaultKeepBuilds
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var release = Release(origin: origin, signers: try signing.signers())
        release.keepBuilds = keepBuilds
        let report = try release.promote(try BuildID(buildId), from: try Channel(from), to: try Channel(to))
        warn(report.warnings)
        Output(json: json).result(report, human: report.alreadyCurrent
            ? "build \(report.buildId) is already the newest on \(report.channel); nothing written"
            : "build \(report.buildId) of \(from) is now the newest on \(report.channel) (sequence \(report.sequence)); "
                + "players on \(report.channel) get it at their next sync")
    }
}

struct RepoRollback: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rollback", abstract: "Put the previous build back on a channel, as a new sequence.",
        discussion: """
            Players move back at their next sync with every check intact (the sequence still only
            grows), and their `patchsync status` says why. By default the build before the newest that
            no earlier rollback left; --to names one.

            Example:
              patchsync repo rollback --channel live --reason "crash on start with old saves" --origin out/ \\
                --targets-key keys/targets.key --online-key keys/online.key
            """)

    @Option(help: "The channel to roll back.") var channel: String
    @Option(help: "The build id to go back to (default: the previous one).") var to: String?
    @Option(help: "Why, shown to players by `patchsync status`.") var reason: String?
    @Option(help: "The origin folder.") var origin: String
    @OptionGroup var signing: TargetsSigning
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let release = Release(origin: origin, signers: try signing.signers())
        let report = try release.rollback(channel: try Channel(channel), to: try to.map { t throws(PatchSyncError) in try BuildID(t) },
                                          reason: reason)
        warn(report.warnings)
        Output(json: json).result(report, human: "channel \(report.channel) is back on build \(report.buildId) (sequence "
                                  + "\(report.sequence)), from \(report.rollback?.from ?? "?"); players move back at their next sync")
    }
}
