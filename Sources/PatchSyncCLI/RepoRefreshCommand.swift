import ArgumentParser
import Foundation
import PatchSync

struct RepoRefresh: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refresh", abstract: "Re-sign snapshot and timestamp before they expire (a cron job).",
        discussion: """
            Needs only the online key. It also releases each preload build whose --release-at has come, \
            from its key file in --content-keys (default: the content/ folder beside the online key). A due \
            build whose key file is not there is named, and the command exits 64 after re-signing.

            Example:
              patchsync repo refresh --origin out/ --online-key keys/online.key
            """)

    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @OptionGroup var originWait: OriginWait
    @Option(name: [.customLong("online-key"), .customLong("key")], help: "The online key file.") var key: String
    @Option(
        help:
            "The folder of preload content keys (default: the folder publish recorded, else content/ beside the online key)."
    ) var contentKeys: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let (repo, outcome) = try await originWait.open(origin, purpose: "refreshing its metadata", json: json) {
            folder in
            var repo = try Repository.open(origin: folder, for: "refreshing its metadata", finishingRotation: true)
            let outcome = try repo.refresh(
                key: try SigningKey.load(path: key),
                contentKeys: contentKeyFolder(contentKeys, origin: folder, beside: key))
            return (repo, outcome)
        }
        let warnings = repo.expiryWarnings()
        warn(warnings)
        struct Result: Encodable {
            var origin: String
            var refreshed: Bool
            var released: [String]
            var missingKeys: [String]
            var failed: [String]
            var warnings: [String]
        }
        Output(json: json).result(
            Result(
                origin: origin, refreshed: true, released: outcome.released,
                missingKeys: outcome.missingKeys, failed: outcome.failed, warnings: warnings),
            human: "re-signed snapshot and timestamp of \(origin)"
                + outcome.released.map { "\nreleased \($0): players unlock it at their next sync" }.joined())
        // Refresh signs only snapshot and timestamp: an expired targets or root makes every player refuse
        // the repository whatever refresh signs, so the cron job must fail loudly, naming the renewal.
        let now = Date()
        if let expired = repo.expiredRoles(now: now).first(where: { ["root", "targets"].contains($0.role) }) {
            throw PatchSyncError(
                .refusedData,
                "\(expired.role).json of \(origin) expired at \(TUFDate.format(expired.expires)): players refuse the repository "
                    + "until it is signed again, which refresh (the online key) cannot do",
                remedy: "run `\(expired.renewal)`; snapshot and timestamp were re-signed")
        }
        if !outcome.failed.isEmpty {
            throw PatchSyncError(
                .refusedData,
                "a preload build due for release could not be released: "
                    + outcome.failed.joined(separator: "; "),
                remedy: "fix what it names, then run `patchsync repo release BUILD`; snapshot and timestamp "
                    + "were re-signed")
        }
        if !outcome.missingKeys.isEmpty {
            throw PatchSyncError(
                .usage,
                "a preload build is due for release and its key file is not at hand: "
                    + outcome.missingKeys.joined(separator: ", "),
                remedy: "copy the key file publish wrote into --content-keys, or run `patchsync repo release "
                    + "BUILD` where it is; snapshot and timestamp were re-signed")
        }
    }
}
