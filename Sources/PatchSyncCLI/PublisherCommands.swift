import ArgumentParser
import Foundation
import PatchSync

struct Keygen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create the Ed25519 keys of a repository: root, targets and online.",
        discussion: """
            root.key signs the root (keep it offline), targets.key signs what builds exist (publish,
            promote, rollback: keep it off always-on hosts), online.key signs snapshot and timestamp
            (the only key the `repo refresh` cron job holds).

            Examples:
              patchsync keygen --out keys/
              patchsync keygen --out second-root/ --role root    # another root key, for a threshold of 2
            """)

    @Option(help: "The folder for the key files (created, files mode 0600).")
    var out: String

    @Option(help: "Write only this role's key (root, targets or online); repeat for several.")
    var role: [String] = []

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() async throws {
        let paths = try Keys.generate(into: out, roles: role.isEmpty ? Keys.roles : role)
        let written = [paths.rootKey, paths.targetsKey, paths.onlineKey].compactMap { $0 }
        Output(json: json).result(paths, human: "wrote " + written.joined(separator: ", "))
    }
}

/// Loads each key file.
func loadKeys(_ paths: [String]) throws(PatchSyncError) -> [SigningKey] {
    var keys: [SigningKey] = []
    for path in paths { keys.append(try SigningKey.load(path: path)) }
    return keys
}

struct RepoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "repo", abstract: "Create a repository, re-sign, renew or rotate its metadata, release builds, prune.",
        subcommands: [RepoInit.self, RepoStatus.self, RepoCheck.self, RepoRefresh.self, RepoRelease.self, RepoRenew.self, RepoRotateRoot.self,
                      RepoPromote.self, RepoRollback.self, RepoPrune.self])
}

struct RepoInit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init", abstract: "Create a new repository: signed root, empty targets.",
        discussion: """
            Each role has its own keys. Several --root-key or --targets-key make that role need
            signatures from --root-threshold / --targets-threshold of them (default: all given).

            Example:
              patchsync repo init --origin out/ --root-key keys/root.key --targets-key keys/targets.key \\
                --online-key keys/online.key
            """)

    @Option(help: "The origin folder to create the repository in.") var origin: String
    @Option(help: "A root key file (repeat for several root keys).") var rootKey: [String] = []
    @Option(help: "How many root keys must sign a new root (default: all given).") var rootThreshold: Int?
    @Option(help: "A targets key file (repeat for several): signs publish, promote and rollback.") var targetsKey: [String] = []
    @Option(help: "How many targets keys must sign targets (default: all given).") var targetsThreshold: Int?
    @Option(help: "The online key file (signs snapshot and timestamp).") var onlineKey: String
    @Option(help: "How long the root stays valid (730d, 12h, …).") var expires: String = "730d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        guard !rootKey.isEmpty, !targetsKey.isEmpty else {
            throw PatchSyncError(.usage, "a repository needs a root key and a targets key",
                                 remedy: "give --root-key and --targets-key (`patchsync keygen --out keys/` writes them)")
        }
        var lifetimes = Repository.Lifetimes()
        lifetimes.root = try parseDuration(expires)
        let roots = try loadKeys(rootKey), targets = try loadKeys(targetsKey), online = try SigningKey.load(path: onlineKey)
        let repo = try Repository.create(
            origin: origin,
            keys: Repository.KeySet(root: roots.map(\.publicKey), rootThreshold: rootThreshold,
                                    targets: targets.map(\.publicKey), targetsThreshold: targetsThreshold,
                                    online: online.publicKey),
            signers: Repository.Signers(root: roots, targets: targets, online: online), lifetimes: lifetimes)
        struct Result: Encodable { var origin: String; var root: String }
        let root = repo.origin + "/metadata/root.json"
        Output(json: json).result(Result(origin: repo.origin, root: root),
                                  human: "created a repository in \(repo.origin)\nship \(root) with the game")
    }
}

struct RepoRefresh: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refresh", abstract: "Re-sign snapshot and timestamp before they expire (a cron job).",
        discussion: """
            Needs only the online key. It also releases each preload build whose --release-at has come,
            from its key file in --content-keys (default: the content/ folder beside the online key). A due
            build whose key file is not there is named, and the command exits 64 after re-signing.

            Example:
              patchsync repo refresh --origin out/ --online-key keys/online.key
            """)

    @Option(help: "The origin folder.") var origin: String
    @Option(name: [.customLong("online-key"), .customLong("key")], help: "The online key file.") var key: String
    @Option(help: "The folder of preload content keys (default: content/ beside the online key).") var contentKeys: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var repo = try Repository.open(origin: origin, for: "refreshing its metadata")
        let outcome = try repo.refresh(key: try SigningKey.load(path: key),
                                       contentKeys: contentKeys ?? defaultContentKeys(beside: key))
        let warnings = repo.expiryWarnings()
        warn(warnings)
        struct Result: Encodable {
            var origin: String; var refreshed: Bool; var released: [String]; var missingKeys: [String]; var failed: [String]
            var warnings: [String]
        }
        Output(json: json).result(Result(origin: origin, refreshed: true, released: outcome.released,
                                         missingKeys: outcome.missingKeys, failed: outcome.failed, warnings: warnings),
                                  human: "re-signed snapshot and timestamp of \(origin)"
                                      + outcome.released.map { "\nreleased \($0): players unlock it at their next sync" }.joined())
        if !outcome.failed.isEmpty {
            throw PatchSyncError(.refusedData, "a preload build due for release could not be released: "
                                 + outcome.failed.joined(separator: "; "),
                                 remedy: "fix what it names, then run `patchsync repo release BUILD`; snapshot and timestamp "
                                     + "were re-signed")
        }
        if !outcome.missingKeys.isEmpty {
            throw PatchSyncError(.usage, "a preload build is due for release and its key file is not at hand: "
                                 + outcome.missingKeys.joined(separator: ", "),
                                 remedy: "copy the key file publish wrote into --content-keys, or run `patchsync repo release "
                                     + "BUILD` where it is; snapshot and timestamp were re-signed")
        }
    }
}

/// The content-key folder publish and refresh use by default: `content/` beside the given key file.
func defaultContentKeys(beside keyFile: String) -> String {
    let parent = keyFile.contains("/") ? String(keyFile[..<keyFile.lastIndex(of: "/")!]) : "."
    return parent + "/content"
}

struct RepoRelease: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "release", abstract: "Release a preload build now: publish its content key in signed metadata.",
        discussion: """
            Signs the key as a target of the releases role with the online key (no targets key), then
            snapshot and timestamp. Players who preloaded the build unlock it at their next sync, with
            one small request, and play it at the next start. The key is checked against the one the
            build was sealed with first. `repo refresh` does the same on its own once --release-at passes.

            Example:
              patchsync repo release 1.5 --origin out/ --online-key keys/online.key
            """)

    @Argument(help: "The build id of the preload build.") var buildId: String
    @Option(help: "The origin folder.") var origin: String
    @Option(help: "The channel.") var channel: String = "live"
    @Option(help: "The online key file.") var onlineKey: String
    @Option(help: "The folder of preload content keys (default: content/ beside the online key).") var contentKeys: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let build = try BuildID(buildId), channelName = try Channel(channel)
        var repo = try Repository.open(origin: origin, for: "releasing \(build)")
        if repo.isReleased(channel: channelName.name, build: build.value) {
            struct Result: Encodable { var origin: String; var buildId: String; var released: Bool; var alreadyReleased: Bool }
            Output(json: json).result(Result(origin: origin, buildId: build.value, released: true, alreadyReleased: true),
                                      human: "build \(build) of \(channelName) was already released; nothing changed")
            return
        }
        try repo.release(build: build.value, channel: channelName.name,
                         contentKeys: contentKeys ?? defaultContentKeys(beside: onlineKey), online: try SigningKey.load(path: onlineKey))
        struct Result: Encodable { var origin: String; var buildId: String; var released: Bool; var alreadyReleased: Bool }
        Output(json: json).result(Result(origin: origin, buildId: build.value, released: true, alreadyReleased: false),
                                  human: "released build \(build) of \(channelName): players unlock it at their next sync")
    }
}

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

    @Option(help: "The origin folder.") var origin: String
    @Option(help: "A root key file (repeat up to the root threshold): renews root.") var rootKey: [String] = []
    @Option(help: "A targets key file (repeat up to the targets threshold): renews targets.") var targetsKey: [String] = []
    @Option(help: "The online key file (re-signs snapshot and timestamp after targets).") var onlineKey: String?
    @Option(help: "How long the renewed root stays valid.") var rootExpires: String = "730d"
    @Option(help: "How long the renewed targets stay valid.") var targetsExpires: String = "455d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        guard !rootKey.isEmpty || !targetsKey.isEmpty else {
            throw PatchSyncError(.usage, "nothing to renew", remedy: "give --targets-key (with --online-key), --root-key, or both")
        }
        var lifetimes = Repository.Lifetimes()
        lifetimes.root = try parseDuration(rootExpires)
        lifetimes.targets = try parseDuration(targetsExpires)
        var repo = try Repository.open(origin: origin, for: "renewing its metadata")
        var renewed: [String] = []
        if !rootKey.isEmpty {
            try repo.rotateRoot(Repository.RootChange(), signers: Repository.Signers(root: try loadKeys(rootKey)),
                                lifetimes: lifetimes)
            renewed.append("root (version \(repo.rootVersion))")
        }
        if !targetsKey.isEmpty {
            try repo.renewTargets(signers: Repository.Signers(targets: try loadKeys(targetsKey),
                                                              online: try onlineKey.map { p throws(PatchSyncError) in try SigningKey.load(path: p) }),
                                  lifetimes: lifetimes)
            renewed.append("targets")
        }
        struct Result: Encodable { var origin: String; var renewed: [String] }
        Output(json: json).result(Result(origin: origin, renewed: renewed),
                                  human: "renewed \(renewed.joined(separator: " and ")) of \(origin)")
    }
}

struct RepoRotateRoot: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate-root",
        abstract: "Sign a new root version with new keys or thresholds (rotation, compromise, migration).",
        discussion: """
            The new root is signed by the current root keys (--root-key, up to the current threshold) and
            the new ones, so every client that trusts the current root moves to it on its next sync. New
            targets keys re-sign targets.json at once, and a new online key snapshot and timestamp; the
            old keys stop working. Generate new keys first with `patchsync keygen --out NEW_FOLDER`.
            A repository whose online key also signed targets moves to its own targets key with
            --new-targets-key.

            Examples:
              patchsync repo rotate-root --origin out/ --root-key keys/root.key \\
                --new-root-key new/root.key --new-online-key new/online.key
              patchsync repo rotate-root --origin out/ --root-key keys/root.key \\
                --new-targets-key keys/targets.key --online-key keys/online.key
            """)

    @Option(help: "A current root key file (repeat up to the current root threshold).") var rootKey: [String] = []
    @Option(help: "The origin folder.") var origin: String
    @Option(help: "A new root key file (repeat for several); replaces the root keys.") var newRootKey: [String] = []
    @Option(help: "How many root keys must sign from now on.") var rootThreshold: Int?
    @Option(help: "A new targets key file (repeat for several); replaces the targets keys.") var newTargetsKey: [String] = []
    @Option(help: "How many targets keys must sign from now on.") var targetsThreshold: Int?
    @Option(help: "The new online key file (signs snapshot and timestamp from now on).") var newOnlineKey: String?
    @Option(help: "The current online key file, when targets keys change and the online key does not.") var onlineKey: String?
    @Option(help: "A current targets key file (repeat up to the threshold), when the online key changes on a repository with preloads.")
    var targetsKey: [String] = []
    @Option(help: "How long the new root stays valid (730d, 12h, …).") var expires: String = "730d"
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var lifetimes = Repository.Lifetimes()
        lifetimes.root = try parseDuration(expires)
        var repo = try Repository.open(origin: origin, for: "rotating its root")
        let newRoots = try loadKeys(newRootKey), newTargets = try loadKeys(newTargetsKey)
        let newOnline = try newOnlineKey.map { p throws(PatchSyncError) in try SigningKey.load(path: p) }
        let online = try onlineKey.map { p throws(PatchSyncError) in try SigningKey.load(path: p) }
        let change = Repository.RootChange(root: newRoots.isEmpty ? nil : newRoots.map(\.publicKey), rootThreshold: rootThreshold,
                                           targets: newTargets.isEmpty ? nil : newTargets.map(\.publicKey),
                                           targetsThreshold: targetsThreshold, online: newOnline?.publicKey)
        try repo.rotateRoot(change, signers: Repository.Signers(root: try loadKeys(rootKey) + newRoots, targets: newTargets.isEmpty ? try loadKeys(targetsKey) : newTargets,
                                                                online: newOnline ?? online),
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
            Modes, empty folders and symbolic links are published too; a link must resolve inside
            the build (--dereference-external copies what an escaping or absolute one points to).

            Example:
              patchsync publish build/ --origin out/ --build-id 1.4.2+873 \\
                --targets-key keys/targets.key --online-key keys/online.key

            With --release-at, the build is a preload: its new objects, packs, deltas and its manifest
            are sealed (AES-256-GCM) with a fresh content key, written to --content-keys (default:
            content/ beside the targets key), never to the origin. Players download it ahead and play
            it once `repo release` or the `repo refresh` cron job publishes the key.

              patchsync publish build/ --origin out/ --build-id 1.5 --release-at 2026-12-01T17:00:00Z \\
                --targets-key keys/targets.key --online-key keys/online.key
            """)

    @Argument(help: "The build folder.") var buildDirectory: String
    @Option(help: "The origin folder (created with `repo init`).") var origin: String
    @Option(help: "The build id, e.g. 1.4.2+873.") var buildId: String
    @OptionGroup var signing: TargetsSigning
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
    @Flag(help: "Copy what a symbolic link pointing outside the build folder (or absolute) points to, rather than refuse the build.")
    var dereferenceExternal = false
    @Option(help: ArgumentHelp("Publish a preload, sealed until this time (UTC, e.g. 2026-12-01T17:00:00Z).",
                               valueName: "time")) var releaseAt: String?
    @Option(help: "The folder preload content keys go to (default: content/ beside the targets key).") var contentKeys: String?
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
        options.dereferenceExternal = dereferenceExternal
        if let chunkSize {
            let average = chunkSize << 10
            options.chunking = ChunkingParameters(minSize: average / 4, averageSize: average, maxSize: average * 4)
        }
        if let releaseAt {
            guard let date = TUFDate.parse(releaseAt) else {
                throw PatchSyncError(.usage, "--release-at '\(releaseAt)' is not a UTC time",
                                     remedy: "write it as 2026-12-01T17:00:00Z")
            }
            options.preload = Publisher.Preload(releaseAt: date, contentKeys: contentKeys
                                                ?? defaultContentKeys(beside: signing.targetsKey.first ?? "."))
        }
        let output = Output(json: json)
        var last = ContinuousClock.now
        let report = try Publisher(options: options, signers: try signing.signers()).run { done, total in
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
                + (report.preload.map { preload in
                    "\npreload: sealed until \(TUFDate.format(preload.releaseAt)); content key in \(preload.keyFile) "
                        + "(keep it private: `repo release` or `repo refresh` publishes it at the release)"
                        + preload.routes.sorted { $0.key < $1.key }.map { "\n  players on \($0.key) preload \(ByteCount.format($0.value))" }.joined()
                } ?? "")
        warn(report.warnings)
        output.result(report, human: human)
    }
}
