import ArgumentParser
import Foundation
import PatchSync

struct RepoRelease: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "release", abstract: "Release a preload build now: publish its content key in signed metadata.",
        discussion: """
            Signs the key as a target of the releases role with the online key (no targets key), then \
            snapshot and timestamp. Players who preloaded the build unlock it at their next sync, with \
            one small request, and play it at the next start. The key is checked against the one the \
            build was sealed with first. `repo refresh` does the same on its own once --release-at passes.

            Example:
              patchsync repo release 1.5 --origin out/ --online-key keys/online.key
            """)

    @Argument(help: "The build id of the preload build.") var buildId: String
    @Option(help: "The origin folder, or a bucket (s3://BUCKET/PREFIX).") var origin: String
    @OptionGroup var originWait: OriginWait
    @Option(help: "The channel (needed only when the build id is a preload on several).") var channel: String?
    @Option(help: "The online key file.") var onlineKey: String
    @Option(
        help:
            "The folder of preload content keys (default: the folder publish recorded, else content/ beside the online key)."
    ) var contentKeys: String?
    @Flag(help: "Print the result as JSON.") var json = false

    struct Result: Encodable {
        var origin: String
        var buildId: String
        var released: Bool
        var alreadyReleased: Bool
    }

    func run() async throws {
        let build = try BuildID(buildId)
        let already = try await originWait.open(origin, purpose: "releasing \(build)", json: json) {
            folder throws -> Bool in
            var repo = try Repository.open(origin: folder, for: "releasing \(build)")
            let channelName = try Channel(try channel ?? Self.channel(of: build, in: repo))
            if repo.isReleased(channel: channelName.name, build: build.value) { return true }
            try repo.release(
                build: build.value, channel: channelName.name,
                contentKeys: contentKeyFolder(contentKeys, origin: folder, beside: onlineKey),
                online: try SigningKey.load(path: onlineKey))
            return false
        }
        if already {
            Output(json: json).result(
                Result(origin: origin, buildId: build.value, released: true, alreadyReleased: true),
                human: "build \(build) was already released; nothing changed")
            return
        }
        Output(json: json).result(
            Result(origin: origin, buildId: build.value, released: true, alreadyReleased: false),
            human: "released build \(build): players unlock it at their next sync")
    }

    /// The one channel that lists `build` as a preload; live when none does (the release names what is missing).
    static func channel(of build: BuildID, in repo: Repository) throws(PatchSyncError) -> String {
        let channels = ChannelListing.all(repo).filter { $0.build(build.value)?.info.preload != nil }.map(\.channel)
        guard channels.count <= 1 else {
            throw PatchSyncError(
                .usage, "build \(build) is a preload on \(channels.joined(separator: " and "))",
                remedy: "name one with --channel")
        }
        return channels.first ?? Channel.live.name
    }
}
