import ArgumentParser
import Foundation
import PatchSync

struct ManifestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "manifest", abstract: "Look inside a build's manifest.", subcommands: [ManifestShow.self])
}

struct ManifestShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract:
            "Print what a build's manifest holds: files, bytes, chunks, the objects they sit in, bundles, delta packs.",
        discussion: """
            BUILD is what `diff` takes: an origin URL (file://, http://, https://, with #BUILD for a given \
            build, else the channel's newest; #BUILD@CHANNEL for another channel's), checked through the \
            TUF chain from --root; an install folder (its current build); a build folder (chunked on the \
            fly, nothing written); or a manifest file (a build's target as the origin serves it, or its JSON \
            view). `chunks elsewhere` counts the chunks an earlier build stored, which stay in its objects; \
            `most ranges` is the most places one file is read from in a fresh install. --decoded prints the \
            manifest itself in its JSON view, which manifests/manifest.schema.json documents (the binary \
            format is described in manifests/manifest_reader.py).

            Examples:
              patchsync manifest show file:///srv/origin#1.4.2 --root root.json
              patchsync manifest show ~/Games/forest --files --json
              patchsync manifest show ~/Games/forest --decoded > forest-manifest.json
            """)

    @Argument(help: "The build: an origin URL, an install folder, a build folder or a manifest file.") var build: String
    @Option(help: "The root.json to verify an origin URL from.") var root: String?
    @Option(help: "The channel of an origin URL.") var channel: String = "live"
    @Option(help: "A bundles file (JSON), for a build folder.") var bundles: String?
    @Flag(help: "List every file: size, mode, bundle, chunks, stored bytes, objects and ranges.") var files = false
    @Flag(help: "Print the result as JSON.") var json = false
    @Flag(help: "Print the manifest itself, decoded, as one JSON document.") var decoded = false

    func run() async throws {
        let rules =
            try bundles.map { (path) throws(PatchSyncError) in try BundleRules.load(path: path) }
            ?? BundleRules(bundles: [.base])
        let side = try await DiffSide.load(build, root: root, channel: channel, bundles: rules, deltaSources: 0)
        if decoded {
            print(String(decoding: try side.manifest.json(), as: UTF8.self))
            return
        }
        let summary = ManifestSummary(side.manifest, listingFiles: files)
        Output(json: json).result(summary, human: Self.describe(summary, name: side.name))
    }

    static func describe(_ s: ManifestSummary, name: String) -> String {
        var lines = [
            "\(name): build \(s.buildId) on \(s.channel), sequence \(s.sequence), manifest format \(s.formatVersion)",
            "  \(s.files) files, \(s.links) links, \(s.folders) empty folders: \(ByteCount.format(s.bytes)), "
                + "\(ByteCount.format(s.storedBytes)) stored",
            "  \(s.chunks) chunks in \(s.objects) objects; \(s.chunksElsewhere) chunks elsewhere (stored by an earlier "
                + "build); most ranges \(s.mostRanges)" + (s.mostRangesFile.map { " (\($0))" } ?? "")
        ]
        for bundle in s.bundles {
            lines.append(
                "  bundle \(bundle.name) (\(bundle.required ? "required" : "optional"), priority \(bundle.priority)): "
                    + "\(bundle.files) files, \(ByteCount.format(bundle.bytes))")
        }
        for delta in s.deltas {
            lines.append("  delta pack from \(delta.from): \(delta.files) files, \(ByteCount.format(delta.bytes))")
        }
        for file in s.fileList ?? [] {
            lines.append(
                "  \(file.path)  \(ByteCount.format(file.size)), mode \(file.mode), \(file.bundle), \(file.chunks) chunks, "
                    + "\(ByteCount.format(file.storedBytes)) stored in \(file.objects) objects, \(file.ranges) ranges")
        }
        return lines.joined(separator: "\n")
    }
}
