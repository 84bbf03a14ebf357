import ArgumentParser
import Foundation
import PatchSync

struct Publish: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Chunk, compress and publish a build folder into an origin.",
        discussion: """
            Writes only objects not already in the origin, then the manifest and new signed \
            metadata. Publishing the same build id with the same content again is a no-op. \
            For each of the channel's latest builds (--delta-sources, default 2) it also writes a \
            delta pack: players on those builds patch changed files from what they have, and \
            fetch chunks for the rest. New files up to --small-file KiB (default 4096) go into pack \
            objects of about --pack-size KiB (default 14336), so one request carries many files. \
            Modes, empty folders and symbolic links are published too; a link must resolve inside \
            the build (--dereference-external copies what an escaping or absolute one points to).

            Example:
              patchsync publish build/ --origin out/ --build-id 1.4.2+873 \\
                --targets-key keys/targets.key --online-key keys/online.key \\
                --exclude '*.pdb' --description "Winter event, crash fix in the lobby"

            With --release-at, the build is a preload: its new objects, packs, deltas and its manifest \
            are sealed (AES-256-GCM) with a fresh content key, written to --content-keys (default: \
            content/ beside the targets key), never to the origin. Players download it ahead and play \
            it once `repo release` or the `repo refresh` cron job publishes the key.

              patchsync publish build/ --origin out/ --build-id 1.5 --release-at 2026-12-01T17:00:00Z \\
                --targets-key keys/targets.key --online-key keys/online.key
            """)

    @Argument(help: "The build folder.") var buildDirectory: String
    @Option(help: "The origin: its folder (created with `repo init`), or a bucket, s3://BUCKET/PREFIX.") var origin:
        String
    @OptionGroup var originWait: OriginWait
    @Option(help: "The build id, e.g. 1.4.2+873.") var buildId: String
    @OptionGroup var signing: TargetsSigning
    @Option(help: "The channel.") var channel: String = "live"
    @Option(help: "A bundles file (JSON): bundle name, required, priority, path globs.") var bundles: String?
    @Option(help: "How many of the channel's latest builds get a delta pack to this one (0: none).")
    var deltaSources = 2
    @Option(
        help: ArgumentHelp(
            "The average chunk size in KiB, a power of two (min a quarter, max 4×).",
            valueName: "KiB")) var chunkSize: Int?
    @Option(
        help: ArgumentHelp(
            "New files up to this size go into pack objects (0: every file its own object).",
            valueName: "KiB")) var smallFile = PackWriter.defaultSmallFile >> 10
    @Option(help: ArgumentHelp("The size at which a pack of small files is closed.", valueName: "KiB"))
    var packSize = PackWriter.defaultTargetSize >> 10
    @Option(
        help: ArgumentHelp(
            "A changed file keeps the chunks earlier builds stored where they are while it spans at most 2 ranges plus one per this many of its stored bytes; beyond that it is stored whole again, so a fresh install reads it in few requests.",
            valueName: "KiB")) var rangeSize = Int(Fragmentation.standard.bytesPerRange >> 10)
    @Option(
        help: ArgumentHelp(
            "How new objects are compressed: zstd (the default, level 3) or deflate, with a level after a colon (zstd:9, deflate:6).",
            valueName: "codec")) var codec = "zstd"
    @Option(
        help:
            "How many builds of each channel targets.json keeps listed, the newest (older ones can no longer be installed)."
    )
    var keepBuilds = Publisher.Options.defaultKeepBuilds
    @Flag(
        help:
            "Copy what a symbolic link pointing outside the build folder (or absolute) points to, rather than refuse the build."
    )
    var dereferenceExternal = false
    @Flag(
        help:
            "Refuse names Windows or macOS cannot hold (reserved names such as CON, ':', a trailing dot or space) instead of warning."
    )
    var portable = false
    @Option(
        help: ArgumentHelp(
            "Publish a preload, sealed until this time (UTC, e.g. 2026-12-01T17:00:00Z).",
            valueName: "time")) var releaseAt: String?
    @Option(
        help:
            "The folder of preload content keys: a preload's goes there, and a pending preload's is read there to list it again above this build (default: the folder an earlier preload publish recorded, else content/ beside the targets key)."
    ) var contentKeys: String?
    @Flag(help: "Check the folder and cost the patch from the channel's current build; write nothing.") var dryRun =
        false
    @Flag(
        help: "Publish a build that drops most of the current build's files (refused otherwise, as the wrong folder).")
    var replaceMost = false
    @Flag(
        help: "List the build on a new channel whose name is close to an existing one (refused otherwise, as a typo).")
    var newChannel = false
    @Option(
        help: ArgumentHelp(
            "Leave out what matches this glob: a name at any depth ('*.pdb'), or a path from the top with a slash ('tools/**'). Repeatable; --dry-run lists what it leaves out.",
            valueName: "glob")) var exclude: [String] = []
    @Option(help: ArgumentHelp("Leave out the globs of this file, one a line (# comments).", valueName: "file"))
    var excludeFrom: [String] = []
    @Option(
        name: .customLong("description"),
        help: "What the build is, in one line; `repo status` shows it with the date and the publisher.")
    var buildDescription: String?
    @Option(help: "Who publishes, as `repo status` shows it (default: this machine's host name).")
    var publisher: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func validate() throws {
        do {
            try PublishNote.check(by: publisher, description: buildDescription)
            _ = try ExcludeRules(exclude)
        } catch { throw ValidationError(error.message + (error.remedy.map { ": \($0)" } ?? "")) }
        guard deltaSources >= 0 else {
            throw ValidationError("--delta-sources \(deltaSources) is negative: give 0 (no deltas) or more")
        }
        guard keepBuilds >= 1 else {
            throw ValidationError("--keep-builds \(keepBuilds) would list no build: give 1 or more")
        }
    }

    func run() async throws {
        try originWait.apply()
        guard smallFile >= 0, smallFile <= 128 << 10, packSize >= 1, rangeSize >= 1 else {
            throw PatchSyncError(
                .usage,
                "--small-file \(smallFile), --pack-size \(packSize) and --range-size \(rangeSize) must be 0 to 131072 "
                    + "(128 MiB: a pack stays within one object file), 1 or more and 1 or more",
                remedy: "give sizes in KiB, e.g. --small-file 128 --pack-size 4096 --range-size 4096")
        }
        let rules =
            try bundles.map { (path) throws(PatchSyncError) in try BundleRules.load(path: path) }
            ?? BundleRules(bundles: [.base])
        var options = Publisher.Options(
            buildDirectory: buildDirectory, origin: origin,
            buildId: try BuildID(buildId), bundles: rules)
        options.channel = try Channel(channel)
        options.deltaSources = deltaSources
        options.keepBuilds = keepBuilds
        options.smallFileBytes = smallFile << 10
        options.packSize = packSize << 10
        options.fragmentation = Fragmentation(bytesPerRange: Int64(rangeSize) << 10)
        options.codec = try ObjectCodec(parsing: codec)
        options.dereferenceExternal = dereferenceExternal
        options.portable = portable
        options.dryRun = dryRun
        options.replaceMost = replaceMost
        options.newChannel = newChannel
        options.exclude = try ExcludeRules(
            exclude
                + excludeFrom.flatMap { (file) throws(PatchSyncError) in
                    try ExcludeRules.globs(inFile: file)
                })
        options.description = buildDescription
        options.publisherName = publisher
        options.contentKeys = contentKeyFolder(contentKeys, origin: origin, beside: signing.targetsKey.first ?? ".")
        if let chunkSize {
            let average = chunkSize << 10
            options.chunking = ChunkingParameters(minSize: average / 4, averageSize: average, maxSize: average * 4)
        }
        if let releaseAt {
            guard let date = TUFDate.parse(releaseAt) else {
                throw PatchSyncError(
                    .usage, "--release-at '\(releaseAt)' is not a UTC time",
                    remedy: "write it as 2026-12-01T17:00:00Z")
            }
            options.preload = Publisher.Preload(
                releaseAt: date,
                contentKeys: contentKeyFolder(contentKeys, origin: origin, beside: signing.targetsKey.first ?? "."))
        }
        let output = Output(json: json)
        var last = ContinuousClock.now
        let signers = try signing.signers()
        let report = try await originWait.open(origin, purpose: "publishing", writes: !dryRun, json: json) { folder in
            var options = options
            options.origin = folder
            return try Publisher(options: options, signers: signers).run { done, total in
                guard done == total || ContinuousClock.now - last >= .seconds(1) else { return }
                last = ContinuousClock.now
                output.event(
                    ProgressEvent(
                        event: "publish", message: "chunked and stored \(done) of \(total) files",
                        filesDone: done, filesTotal: total))
            }
        }
        let human =
            report.dryRun
            ? "dry run, nothing written: build \(report.buildId) would be sequence \(report.sequence) of \(report.channel), "
                + "\(report.files) files, \(ByteCount.format(report.totalBytes)); "
                + (report.patch.map { patch in
                    "players of \(patch.old) would download \(ByteCount.format(patch.total.downloadBytes)) "
                        + "(\(patch.total.filesAdded) added, \(patch.total.filesChanged) changed, \(patch.total.filesRemoved) removed; "
                        + "deltas can only lower it)"
                } ?? "") + Self.leftOut(report.excluded)
            : report.alreadyPublished
                ? "build \(report.buildId) is already published on \(report.channel) (sequence \(report.sequence)); nothing written"
                : "published build \(report.buildId) on \(report.channel) as sequence \(report.sequence): "
                    + "\(report.files) files, \(ByteCount.format(report.totalBytes)); "
                    + "\(report.objectsWritten) new objects, \(ByteCount.format(report.objectBytesWritten)) written"
                    + (report.reusedChunks > 0
                        ? ", \(report.reusedChunks) chunks of changed files (\(ByteCount.format(report.reusedChunkBytes))) "
                            + "left where earlier builds stored them" : "")
                    + (report.consolidatedFiles.isEmpty
                        ? "" : ", \(report.consolidatedFiles.count) scattered files stored whole again")
                    + report.deltas.map { "; deltas from \($0.from): \($0.files) files, \(ByteCount.format($0.bytes))" }
                    .joined()
                    + report.relistedPreloads.map {
                        "\npending preload \($0) is listed again above it: what players preloaded stays valid"
                    }.joined()
                    + Self.leftOut(report.excluded)
                    + (report.preload.map { preload in
                        "\npreload: sealed until \(TUFDate.format(preload.releaseAt)); content key in \(preload.keyFile) "
                            + "(keep it private: `repo release` or `repo refresh` publishes it at the release)"
                            + preload.routes.sorted { $0.key < $1.key }.map {
                                "\n  players on \($0.key) preload \(ByteCount.format($0.value))"
                            }.joined()
                    } ?? "")
        warn(report.warnings)
        output.result(report, human: human)
    }

    /// The paths --exclude left out, for a person: how many, and the first ten.
    static func leftOut(_ excluded: [String]) -> String {
        guard !excluded.isEmpty else { return "" }
        return "\nleft out by --exclude: \(excluded.count) path(s): " + excluded.prefix(10).joined(separator: ", ")
            + (excluded.count > 10 ? ", … (--json lists them all)" : "")
    }
}
