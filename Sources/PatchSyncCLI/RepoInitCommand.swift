import ArgumentParser
import Foundation
import PatchSync

struct RepoInit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init", abstract: "Create a new repository: signed root, empty targets.",
        discussion: """
            Each role has its own keys. Several --root-key or --targets-key make that role need \
            signatures from --root-threshold / --targets-threshold of them (default: all given).

            Example:
              patchsync repo init --origin out/ --root-key keys/root.key --targets-key keys/targets.key \\
                --online-key keys/online.key
            """)

    @Option(help: "The origin folder to create the repository in, or an empty bucket prefix (s3://BUCKET/PREFIX).")
    var origin: String
    @OptionGroup var originWait: OriginWait
    @Option(help: "A root key file (repeat for several root keys).") var rootKey: [String] = []
    @Option(help: "How many root keys must sign a new root (default: all given).") var rootThreshold: Int?
    @Option(help: "A targets key file (repeat for several): signs publish, promote and rollback.") var targetsKey:
        [String] = []
    @Option(help: "How many targets keys must sign targets (default: all given).") var targetsThreshold: Int?
    @Option(help: "The online key file (signs snapshot and timestamp).") var onlineKey: String
    @Option(help: "How long the root stays valid (730d, 12h, …).") var expires: String = "730d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        guard !rootKey.isEmpty, !targetsKey.isEmpty else {
            throw PatchSyncError(
                .usage, "a repository needs a root key and a targets key",
                remedy: "give --root-key and --targets-key (`patchsync keygen --out keys/` writes them)")
        }
        var lifetimes = Repository.Lifetimes()
        lifetimes.root = try parseDuration(expires)
        let roots = try loadKeys(rootKey), targets = try loadKeys(targetsKey),
            online = try SigningKey.load(path: onlineKey)
        let keys = Repository.KeySet(
            root: roots.map(\.publicKey), rootThreshold: rootThreshold,
            targets: targets.map(\.publicKey), targetsThreshold: targetsThreshold,
            online: online.publicKey)
        let signers = Repository.Signers(root: roots, targets: targets, online: online)
        let root = try await originWait.open(origin, purpose: "creating a repository", creating: true, json: json) {
            folder in
            let repo = try Repository.create(origin: folder, keys: keys, signers: signers, lifetimes: lifetimes)
            return OriginLayout(root: repo.origin).rootMetadataFile
        }
        struct Result: Encodable {
            var origin: String
            var root: String
        }
        Output(json: json).result(
            Result(origin: origin, root: root),
            human: "created a repository in \(origin)\nship \(root) with the game")
    }
}
