import ArgumentParser
import Foundation
import PatchSync

struct Rollback: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make the previous build current again, atomically (one step back).",
        discussion: """
            The build rolled back from is held back: sync does not install it again until a \
            newer build is published. Refused (exit 75) while the game runs.

            Example:
              patchsync rollback --install ~/Games/forest
            """)

    @OptionGroup var options: ClientOptions

    func run() async throws {
        let report = try options.openInstall().rollback()
        Output(json: options.json).result(report, human: "build \(report.current ?? "?") is current again")
    }
}
