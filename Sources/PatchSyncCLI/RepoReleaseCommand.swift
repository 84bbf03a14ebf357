import ArgumentParser
import Foundation
import PatchSync

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
        struct Result: Encodable {
            var origin: String
            var buildId: String
            var released: Bool
            var alreadyReleased: Bool
        }
        if repo.isReleased(channel: channelName.name, build: build.value) {
            Output(json: json).result(
                Result(origin: origin, buildId: build.value, released: true, alreadyReleased: true),
                human: "build \(build) of \(channelName) was already released; nothing changed")
            return
        }
        try repo.release(
            build: build.value, channel: channelName.name,
            contentKeys: contentKeys ?? defaultContentKeys(beside: onlineKey), online: try SigningKey.load(path: onlineKey))
        Output(json: json).result(
            Result(origin: origin, buildId: build.value, released: true, alreadyReleased: false),
            human: "released build \(build) of \(channelName): players unlock it at their next sync")
    }
}
