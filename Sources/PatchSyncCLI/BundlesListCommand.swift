import ArgumentParser
import Foundation
import PatchSync

extension BundlesCommand {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the bundles of the newest build this install knows, with size, kind and state.",
            discussion: "Example:\n  patchsync bundles list --install ~/Games/forest --json")

        @OptionGroup var options: ClientOptions

        func run() async throws {
            let install = try options.openInstall()
            guard let progress = try install.bundleProgress() else {
                throw PatchSyncError(
                    .usage, "\(install.root) knows no build yet",
                    remedy: "run `patchsync sync --install \(install.root)` first")
            }
            let lines =
                ["build \(progress.buildId): " + ProgressReporter.describe(progress)]
                + progress.bundles.map(BundlesCommand.describe)
            Output(json: options.json).result(progress, human: lines.joined(separator: "\n"))
        }
    }
}
