import ArgumentParser
import Foundation
import PatchSync

struct Keygen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create the Ed25519 keys of a repository: an offline root key and an online key.",
        discussion: "Example:\n  patchsync keygen --out keys/\n\nKeep root.key offline; the online key signs each publish.")

    @Option(help: "The folder for root.key and online.key (created, files mode 0600).")
    var out: String

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() async throws {
        let paths = try Keys.generate(into: out)
        Output(json: json).result(paths, human: "wrote \(paths.rootKey) and \(paths.onlineKey)")
    }
}

struct RepoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "repo", abstract: "Create a repository or re-sign its short-lived metadata.",
        subcommands: [RepoInit.self, RepoRefresh.self, RepoRotateRoot.self])
}

struct RepoInit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init", abstract: "Create a new repository: signed root, empty targets.",
        discussion: "Example:\n  patchsync repo init --origin out/ --root-key keys/root.key --online-key keys/online.key")

    @Option(help: "The origin folder to create the repository in.") var origin: String
    @Option(help: "The root key file.") var rootKey: String
    @Option(help: "The online key file (signs timestamp, snapshot and targets).") var onlineKey: String
    @Option(help: "How long the root stays valid (365d, 12h, …).") var expires: String = "365d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var lifetimes = Repository.Lifetimes()
        lifetimes.root = try parseDuration(expires)
        let repo = try Repository.create(origin: origin, rootKey: try SigningKey.load(path: rootKey),
                                         onlineKey: try SigningKey.load(path: onlineKey), lifetimes: lifetimes)
        struct Result: Encodable { var origin: String; var root: String }
        let root = repo.origin + "/metadata/root.json"
        Output(json: json).result(Result(origin: repo.origin, root: root),
                                  human: "created a repository in \(repo.origin)\nship \(root) with the game")
    }
}

struct RepoRefresh: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refresh", abstract: "Re-sign snapshot and timestamp before they expire (a cron job).",
        discussion: "Example:\n  patchsync repo refresh --origin out/ --key keys/online.key")

    @Option(help: "The origin folder.") var origin: String
    @Option(help: "The online key file.") var key: String
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var repo = try Repository.load(origin: origin)
        try repo.refresh(key: try SigningKey.load(path: key))
        struct Result: Encodable { var origin: String; var refreshed: Bool }
        Output(json: json).result(Result(origin: origin, refreshed: true),
                                  human: "re-signed snapshot and timestamp of \(origin)")
    }
}

struct RepoRotateRoot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-root",
        abstract: "Sign a new root version with new root and/or online keys (key rotation or compromise).",
        discussion: """
            The new root is signed by the current root key and the new one, so every client that trusts
            the current root moves to it on its next sync. With --new-online-key, targets, snapshot and
            timestamp are re-signed by the new online key at once; the old online key stops working.
            Generate new keys first with `patchsync keygen --out NEW_FOLDER`.

            Example:
              patchsync repo rotate-root --origin out/ --root-key keys/root.key \\
                --new-root-key new/root.key --new-online-key new/online.key
            """)

    @Option(help: "The origin folder.") var origin: String
    @Option(help: "The current root key file.") var rootKey: String
    @Option(help: "The new root key file.") var newRootKey: String?
    @Option(help: "The new online key file (signs timestamp, snapshot and targets from now on).") var newOnlineKey: String?
    @Option(help: "How long the new root stays valid (365d, 12h, …).") var expires: String = "365d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var lifetimes = Repository.Lifetimes()
        lifetimes.root = try parseDuration(expires)
        var repo = try Repository.load(origin: origin)
        try repo.rotateRoot(currentRootKey: try SigningKey.load(path: rootKey),
                            newRootKey: try newRootKey.map { path throws(PatchSyncError) in try SigningKey.load(path: path) },
                            newOnlineKey: try newOnlineKey.map { path throws(PatchSyncError) in try SigningKey.load(path: path) },
                            lifetimes: lifetimes)
        struct Result: Encodable { var origin: String; var rootVersion: Int; var root: String }
        let root = origin + "/metadata/root.json"
        Output(json: json).result(Result(origin: origin, rootVersion: repo.rootVersion, root: root),
                                  human: "signed root version \(repo.rootVersion) of \(origin)\n"
                                      + "clients move to it on their next sync; ship \(root) with new game builds")
    }
}

struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Chunk, compress and publish a build folder into an origin.",
        discussion: """
            Writes only objects not already in the origin, then the manifest and new signed
            metadata. Publishing the same build id with the same content again is a no-op.
            For each of the channel's latest builds (--delta-sources, default 2) it also writes a
            delta pack: players on those builds patch changed files from what they have, and
            fetch chunks for the rest. New files up to --small-file KiB (default 4096) go into pack
            objects of about --pack-size KiB (default 14336), so one request carries many files.

            Example:
              patchsync publish build/ --origin out/ --build-id 1.4.2+873 --key keys/online.key
            """)

    @Argument(help: "The build folder.") var buildDirectory: String
    @Option(help: "The origin folder (created with `repo init`).") var origin: String
    @Option(help: "The build id, e.g. 1.4.2+873.") var buildId: String
    @Option(help: "The online key file.") var key: String
    @Option(help: "The channel.") var channel: String = "live"
    @Option(help: "A bundles file (JSON): bundle name, required, priority, path globs.") var bundles: String?
    @Option(help: "How many of the channel's latest builds get a delta pack to this one (0: none).")
    var deltaSources = 2
    @Option(help: ArgumentHelp("The average chunk size in KiB, a power of two (min a quarter, max 4×).",
                               valueName: "KiB")) var chunkSize: Int?
    @Option(help: ArgumentHelp("New files up to this size go into pack objects (0: every file its own object).",
                               valueName: "KiB")) var smallFile = PackWriter.defaultSmallFile >> 10
    @Option(help: ArgumentHelp("The size at which a pack of small files is closed.", valueName: "KiB"))
    var packSize = PackWriter.defaultTargetSize >> 10
    @Option(help: "How many builds of each channel targets.json keeps listed, the newest (older ones can no longer be installed).")
    var keepBuilds = Publisher.Options.defaultKeepBuilds
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        guard smallFile >= 0, packSize >= 1 else {
            throw PatchSyncError(.usage, "--small-file \(smallFile) and --pack-size \(packSize) must be 0 or more and 1 or more",
                                 remedy: "give sizes in KiB, e.g. --small-file 128 --pack-size 4096")
        }
        let rules = try bundles.map { (path) throws(PatchSyncError) in try BundleRules.load(path: path) }
            ?? BundleRules(bundles: [.base])
        var options = Publisher.Options(buildDirectory: buildDirectory, origin: origin,
                                        buildId: try BuildID(buildId), bundles: rules)
        options.channel = try Channel(channel)
        guard deltaSources >= 0 else {
            throw PatchSyncError(.usage, "--delta-sources \(deltaSources) is negative", remedy: "give 0 (no deltas) or more")
        }
        options.deltaSources = deltaSources
        guard keepBuilds >= 1 else {
            throw PatchSyncError(.usage, "--keep-builds \(keepBuilds) would list no build", remedy: "give 1 or more")
        }
        options.keepBuilds = keepBuilds
        options.smallFileBytes = smallFile << 10
        options.packSize = packSize << 10
        if let chunkSize {
            let average = chunkSize << 10
            options.chunking = ChunkingParameters(minSize: average / 4, averageSize: average, maxSize: average * 4)
        }
        let output = Output(json: json)
        var last = ContinuousClock.now
        let report = try Publisher(options: options, key: try SigningKey.load(path: key)).run { done, total in
            guard done == total || ContinuousClock.now - last >= .seconds(1) else { return }
            last = ContinuousClock.now
            output.event(ProgressEvent(event: "publish", message: "chunked and stored \(done) of \(total) files",
                                       filesDone: done, filesTotal: total))
        }
        let human = report.alreadyPublished
            ? "build \(report.buildId) is already published on \(report.channel) (sequence \(report.sequence)); nothing written"
            : "published build \(report.buildId) on \(report.channel) as sequence \(report.sequence): "
                + "\(report.files) files, \(ByteCount.format(report.totalBytes)); "
                + "\(report.objectsWritten) new objects, \(ByteCount.format(report.objectBytesWritten)) written"
                + report.deltas.map { "; deltas from \($0.from): \($0.files) files, \(ByteCount.format($0.bytes))" }.joined()
        output.result(report, human: human)
    }
}
