import ArgumentParser
import Foundation
import PatchSync

struct Apply: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Swap a ready build in, atomically; a no-op when none is ready.",
        discussion: "Refused (exit 75) while the game runs.\n\nExample:\n  patchsync apply --install ~/Games/forest")

    @OptionGroup var options: ClientOptions

    func run() async throws {
        let report = try options.openInstall().applyPendingUpdate()
        let human =
            report.applied
            ? "build \(report.current ?? "?") is now current (previous: \(report.previous ?? "none"))"
            : "no build is ready; current is \(report.current ?? "none")"
        Output(json: options.json).result(report, human: human)
    }
}
