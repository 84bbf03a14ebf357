import ArgumentParser
import Foundation
import PatchSync

struct RepoCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Exit 65 when a role expires soon or a listed build needs a fix (for monitoring).",
        discussion: """
            Root and targets are renewed by hand (`repo renew`): they count when they expire within \
            --within. Snapshot and timestamp are re-signed by the `repo refresh` cron job: they count when \
            less than --online-within is left, which means the job has stopped. Each one found is printed \
            with the command that renews it. It also reads every listed build as players read it and names \
            each one they would refuse, each preload past its release time by more than --release-late \
            and not released, and each pending preload that a newer build left behind, with the command \
            that fixes it. With --bucket, it lists the bucket and fails on every signed file players may \
            ask for that the bucket lacks. With --cdn, it asks that CDN (or cache) in front of the origin for \
            a range of a few of the largest objects twice and for metadata/timestamp.json twice, and fails \
            on a range answered with the whole file, no cache hit on the second request (CF-Cache-Status, \
            X-Cache, Age), bytes that differ from the folder, metadata older than its max-age allows, and \
            objects in the folder that no CDN caches by default (no .bin extension, or over 256 MiB). \
            Exit status: 0 nothing found, 65 something due, expired or to fix.

            Example:
              patchsync repo check --origin out/ --within 30d || mail -s "renew the game's metadata" ops@example.com    # a daily monitoring job
              patchsync repo check --origin out/ --cdn https://cdn.example.com/game    # after setting up a CDN
            """)

    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @Option(help: "How far ahead to look for root and targets (30d, 12h, …).") var within: String = "30d"
    @Option(help: "The least lifetime snapshot and timestamp may have left.") var onlineWithin: String = "2d"
    @Option(help: "How long past its release time a preload may stay unreleased (the refresh job's period).")
    var releaseLate: String = "1h"
    @Option(
        help: "A bucket serving this origin (s3://BUCKET/PREFIX): fail when it lacks a signed file players may ask for."
    )
    var bucket: String?
    @OptionGroup var originWait: OriginWait
    @Option(help: "A CDN or cache in front of this origin (its URL): fail on what it does wrong for players.")
    var cdn: String?
    @Option(help: "With --cdn: the seconds a CDN may serve an old timestamp.json (as upload --metadata-max-age).")
    var metadataMaxAge: Int = 60
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try OriginWait.refuseBucket(bucket, with: origin, sameAllowed: true)
        let (due, problems) = try await originWait.open(origin, purpose: "checking", writes: false, json: json) {
            folder in try await findings(folder)
        }
        struct Result: Encodable {
            var origin: String
            var ok: Bool
            var due: [RepositoryStatus.Role]
            var builds: [Repository.ListingProblem]
        }
        let output = Output(json: json)
        guard due.isEmpty && problems.isEmpty else {
            if json { output.result(Result(origin: origin, ok: false, due: due, builds: problems), human: "") }
            var found: [String] = []
            if !due.isEmpty {
                let names = due.map { "\($0.role) (\($0.daysLeft <= 0 ? "expired" : "\($0.daysLeft) days left"))" }
                found.append(
                    "\(names.joined(separator: ", ")) must be signed again soon, or clients will refuse every update")
            }
            found += problems.map(\.problem)
            let fixes = due.map(\.renewal) + problems.map(\.fix)
            throw PatchSyncError(
                .refusedData, "\(origin): " + found.joined(separator: "; "),
                remedy: fixes.reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }.joined(separator: "; ")
            )
        }
        output.result(
            Result(origin: origin, ok: true, due: [], builds: []),
            human: "\(origin): no role expires within \(within) (snapshot and timestamp: \(onlineWithin)); "
                + "players accept every listed build" + (cdn.map { "; \($0) honours ranges and caches objects" } ?? ""))
    }

    /// What is due within the windows given and what is wrong with the listing, the bucket or the CDN.
    func findings(_ origin: String) async throws -> ([RepositoryStatus.Role], [Repository.ListingProblem]) {
        let repo = try Repository.load(origin: origin)
        let due = repo.expiring(
            within: try parseDuration(within, allowZero: true),
            onlineWithin: try parseDuration(onlineWithin, allowZero: true))
        var problems = repo.listingProblems(now: Date(), late: try parseDuration(releaseLate, allowZero: true))
        if !repo.targetsSignedByCurrentKeys {
            problems.append(
                Repository.ListingProblem(
                    kind: .stoppedRotation, channel: "", buildId: "",
                    problem: "targets.json is still signed by the targets keys root version \(repo.rootVersion) "
                        + "replaced: players that took that root refuse it",
                    fix: "patchsync repo renew --origin \(origin) --targets-key NEW_TARGETS_KEY --online-key ONLINE_KEY"
                ))
        }
        if repo.onlineSignedByPreviousRoot {
            problems.append(
                Repository.ListingProblem(
                    kind: .stoppedRotation, channel: "", buildId: "",
                    problem: "snapshot and timestamp are still signed by the online key root version "
                        + "\(repo.rootVersion) replaced: players that took that root refuse updates",
                    fix: "patchsync repo refresh --origin \(origin) --online-key NEW_ONLINE_KEY"))
        }
        if let bucket {
            let state = try Uploader(origin: origin, bucket: try originWait.store.bucket(bucket)).inspect()
            for path in state.missing {
                problems.append(
                    Repository.ListingProblem(
                        kind: .missingFromBucket, channel: "", buildId: "",
                        problem: "\(state.destination) lacks \(path), which signed metadata it serves names",
                        fix: state.repair))
            }
        }
        if let cdn {
            problems += try await CDNCheck.run(origin: origin, cdn: cdn, metadataMaxAge: max(0, metadataMaxAge))
        }
        return (due, problems)
    }

}
