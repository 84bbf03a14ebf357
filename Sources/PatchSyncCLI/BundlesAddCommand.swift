import ArgumentParser
import Foundation
import PatchSync

extension BundlesCommand {
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Choose optional bundles to install; the next sync fetches only their content.",
            discussion: "Example:\n  patchsync bundles add voices-fr hd-textures --install ~/Games/forest")

        @Argument(help: "Optional bundle names.") var names: [String]
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try BundlesCommand.change(options, adding: names, removing: [])
        }
    }
}
