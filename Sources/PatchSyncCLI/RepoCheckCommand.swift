import ArgumentParser
import Foundation
import PatchSync

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
        struct Result: Encodable {
            var origin: String
            var ok: Bool
            var due: [RepositoryStatus.Role]
        }
        let output = Output(json: json)
        guard due.isEmpty else {
            if json { output.result(Result(origin: origin, ok: false, due: due), human: "") }
            let names = due.map { "\($0.role) (\($0.daysLeft <= 0 ? "expired" : "\($0.daysLeft) days left"))" }
            throw PatchSyncError(
                .refusedData,
                "\(origin): \(names.joined(separator: ", ")) must be signed again soon, "
                    + "or clients will refuse every update",
                remedy: due.map(\.renewal).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
                    .joined(separator: "; "))
        }
        output.result(
            Result(origin: origin, ok: true, due: []),
            human: "\(origin): no role expires within \(within) (snapshot and timestamp: \(onlineWithin))")
    }
}
