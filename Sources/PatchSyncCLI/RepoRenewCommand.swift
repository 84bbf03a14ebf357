import ArgumentParser
import Foundation
import PatchSync

struct RepoRenew: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "renew", abstract: "Sign targets and/or root again with a fresh expiry (same keys, same builds).",
        discussion: """
            With --targets-key (and --online-key): targets.json again, valid for --targets-expires.
            With --root-key: a new root version with the same keys, valid for --root-expires.
            A publish renews targets too; `repo check --within 30d` says when either is due.

            Examples:
              patchsync repo renew --origin out/ --targets-key keys/targets.key --online-key keys/online.key
              patchsync repo renew --origin out/ --root-key keys/root.key
            """)

    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @OptionGroup var originWait: OriginWait
    @Option(help: "A root key file (repeat up to the root threshold): renews root.") var rootKey: [String] = []
    @Option(help: "A targets key file (repeat up to the targets threshold): renews targets.") var targetsKey: [String] =
        []
    @Option(help: "The online key file (re-signs snapshot and timestamp after targets).") var onlineKey: String?
    @Option(help: "How long the renewed root stays valid.") var rootExpires: String = "730d"
    @Option(help: "How long the renewed targets stay valid.") var targetsExpires: String = "455d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        try originWait.apply()
        guard !rootKey.isEmpty || !targetsKey.isEmpty else {
            throw PatchSyncError(
                .usage, "nothing to renew", remedy: "give --targets-key (with --online-key), --root-key, or both")
        }
        var lifetimes = Repository.Lifetimes()
        lifetimes.root = try parseDuration(rootExpires)
        lifetimes.targets = try parseDuration(targetsExpires)
        let renewed = try await originWait.open(origin, purpose: "renewing its metadata", json: json) {
            folder throws -> [String] in
            var repo = try Repository.open(origin: folder, for: "renewing its metadata")
            var renewed: [String] = []
            if !rootKey.isEmpty {
                try repo.rotateRoot(
                    Repository.RootChange(), signers: Repository.Signers(root: try loadKeys(rootKey)),
                    lifetimes: lifetimes)
                renewed.append("root (version \(repo.rootVersion))")
            }
            if !targetsKey.isEmpty {
                try repo.renewTargets(
                    signers: Repository.Signers(
                        targets: try loadKeys(targetsKey),
                        online: try onlineKey.map { p throws(PatchSyncError) in try SigningKey.load(path: p) }),
                    lifetimes: lifetimes)
                renewed.append("targets")
            }
            return renewed
        }
        struct Result: Encodable {
            var origin: String
            var renewed: [String]
        }
        Output(json: json).result(
            Result(origin: origin, renewed: renewed),
            human: "renewed \(renewed.joined(separator: " and ")) of \(origin)")
    }
}
