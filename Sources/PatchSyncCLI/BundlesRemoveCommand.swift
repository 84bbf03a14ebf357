import ArgumentParser
import Foundation
import PatchSync

extension BundlesCommand {
    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop installing optional bundles; their files go at the apply after the next sync.",
            discussion: "Example:\n  patchsync bundles remove hd-textures --install ~/Games/forest")

        @Argument(help: "Optional bundle names.") var names: [String]
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try BundlesCommand.change(options, adding: [], removing: names)
        }
    }
}
