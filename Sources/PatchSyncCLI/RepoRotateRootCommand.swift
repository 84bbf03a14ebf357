import ArgumentParser
import Foundation
import PatchSync

struct RepoRotateRoot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-root",
        abstract: "Sign a new root version with new keys or thresholds (rotation, compromise, migration).",
        discussion: """
            The new root is signed by the current root keys (--root-key, up to the current threshold) and \
            the new ones, so every client that trusts the current root moves to it on its next sync. New \
            targets keys re-sign targets.json at once, and a new online key snapshot and timestamp; the \
            old keys stop working. Generate new keys first with `patchsync keygen --out NEW_FOLDER`. \
            A repository whose online key also signed targets moves to its own targets key with \
            --new-targets-key.

            Examples:
              patchsync repo rotate-root --origin out/ --root-key keys/root.key \\
                --new-root-key new/root.key --new-online-key new/online.key
              patchsync repo rotate-root --origin out/ --root-key keys/root.key \\
                --new-targets-key keys/targets.key --online-key keys/online.key
            """)

    @Option(help: "A current root key file (repeat up to the current root threshold).") var rootKey: [String] = []
    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @OptionGroup var originWait: OriginWait
    @Option(help: "A new root key file (repeat for several); replaces the root keys.") var newRootKey: [String] = []
    @Option(help: "How many root keys must sign from now on.") var rootThreshold: Int?
    @Option(help: "A new targets key file (repeat for several); replaces the targets keys.") var newTargetsKey:
        [String] = []
    @Option(help: "How many targets keys must sign from now on.") var targetsThreshold: Int?
    @Option(help: "The new online key file (signs snapshot and timestamp from now on).") var newOnlineKey: String?
    @Option(help: "The current online key file, when targets keys change and the online key does not.") var onlineKey:
        String?
    @Option(
        help:
            "A current targets key file (repeat up to the threshold), when the online key changes on a repository with preloads."
    )
    var targetsKey: [String] = []
    @Option(help: "How long the new root stays valid (730d, 12h, …).") var expires: String = "730d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var lifetimes = Repository.Lifetimes()
        lifetimes.root = try parseDuration(expires)
        let newRoots = try loadKeys(newRootKey), newTargets = try loadKeys(newTargetsKey)
        let newOnline = try newOnlineKey.map { p throws(PatchSyncError) in try SigningKey.load(path: p) }
        let online = try onlineKey.map { p throws(PatchSyncError) in try SigningKey.load(path: p) }
        let change = Repository.RootChange(
            root: newRoots.isEmpty ? nil : newRoots.map(\.publicKey), rootThreshold: rootThreshold,
            targets: newTargets.isEmpty ? nil : newTargets.map(\.publicKey),
            targetsThreshold: targetsThreshold, online: newOnline?.publicKey)
        let signers = Repository.Signers(
            root: try loadKeys(rootKey) + newRoots,
            targets: newTargets.isEmpty ? try loadKeys(targetsKey) : newTargets,
            online: newOnline ?? online)
        let (rootVersion, root, keys) = try await originWait.open(origin, purpose: "rotating its root", json: json) {
            folder in
            var repo = try Repository.open(origin: folder, for: "rotating its root")
            try repo.rotateRoot(change, signers: signers, lifetimes: lifetimes)
            return (
                repo.rootVersion, OriginLayout(root: folder).rootMetadataFile,
                Repository.recordedContentKeys(origin: folder)
            )
        }
        struct Result: Encodable {
            var origin: String
            var rootVersion: Int
            var root: String
            /// What each host must hold from now on: the key files, by role.
            var hosts: [String: [String]]
        }
        var hosts: [String: [String]] = [:]
        if !newRootKey.isEmpty { hosts["offline (root)"] = newRootKey }
        if !newTargetsKey.isEmpty {
            hosts["release machine (targets, for publish, promote, rollback, withdraw, prune, renew)"] = newTargetsKey
        }
        if let newOnlineKey {
            hosts["cron host (online, for repo refresh and release) and release machine (online, beside targets)"] = [
                newOnlineKey
            ]
        }
        let holds = hosts.sorted { $0.key < $1.key }.map { "  \($0.key): \($0.value.joined(separator: ", "))" }
        Output(json: json).result(
            Result(origin: origin, rootVersion: rootVersion, root: root, hosts: hosts),
            human: "signed root version \(rootVersion) of \(origin)\n"
                + "clients move to it on their next sync; ship \(root) with new game builds"
                + (holds.isEmpty
                    ? ""
                    : "\nthe old keys of the roles changed stop working; from now on each host holds:\n"
                        + holds.joined(separator: "\n"))
                + (newOnlineKey != nil && keys != nil
                    ? "\nthe cron host also needs the preload content keys in \(keys ?? "") (or --content-keys where it keeps them)"
                    : ""))
    }
}
