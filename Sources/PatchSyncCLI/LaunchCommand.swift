import ArgumentParser
import Foundation
import PatchSync

struct Launch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply a ready build, then run the game while holding running.lock.",
        discussion: """
            The game runs with PATCHSYNC_CONTENT_ROOT set to the install's `current` folder and
            its own arguments; launch returns the game's exit status (128+N when killed by signal N).
            Its working directory is the folder of the build it starts (builds/<build>), and a
            relative command (./bin/game) is a file of that build, whatever folder launch runs in.
            The game always starts: when the ready build cannot be applied now (another PatchSync
            process changes the live build, another instance of the game runs, the apply fails),
            launch says why on stderr (with --json, as an "apply" event line on stdout) and runs
            the current build. A discretionary sync stops when the game starts.
            While the game runs, apply and rollback refuse to swap the tree.

            Example:
              patchsync launch --install ~/Games/forest -- ./bin/game --fullscreen
            """)

    @OptionGroup var options: ClientOptions

    @Argument(parsing: .postTerminator, help: "The game command and its arguments, after --.")
    var command: [String] = []

    func run() async throws {
        throw ExitCode(try Self.launch(install: options.install, command: command, json: options.json))
    }

    static func launch(install folder: String, command: [String], json: Bool = false) throws(PatchSyncError) -> Int32 {
        guard let executable = command.first else {
            throw PatchSyncError(.usage, "no game command given", remedy: "put it after --: patchsync launch -- ./game")
        }
        let install = try Install.open(at: folder)
        return try GameLauncher(install: install).launch(executable, Array(command.dropFirst())) { outcome in
            if json {
                struct Event: Encodable {
                    var event = "apply"
                    var applied: Bool
                    var current: String?
                    var skipped: String?
                }
                let line = Output.encode(
                    Event(
                        applied: outcome.report?.applied ?? false, current: outcome.report?.current,
                        skipped: outcome.skipped))
                FileHandle.standardOutput.write(Data((line + "\n").utf8))  // unbuffered: before the game's own output
            } else if let skipped = outcome.skipped {
                FileHandle.standardError.write(Data("patchsync: starting the current build without applying: \(skipped)\n".utf8))
            } else if let report = outcome.report, report.applied {
                FileHandle.standardError.write(Data("applied build \(report.current ?? "?")\n".utf8))
            }
        }
    }

    /// `patchsync launch [--install DIR] -- CMD…` exactly: the launch, without the argument parser.
    /// Any other form (help, --json, mistakes) goes through the parser as usual.
    static func fastPath(_ arguments: [String]) -> (() throws(PatchSyncError) -> Int32)? {
        var rest = arguments.dropFirst()
        guard rest.first == "launch" else { return nil }
        rest = rest.dropFirst()
        var folder = "."
        if rest.first == "--install", rest.count >= 2 {
            folder = rest[rest.index(after: rest.startIndex)]
            rest = rest.dropFirst(2)
        }
        guard rest.first == "--", rest.count >= 2 else { return nil }
        let command = Array(rest.dropFirst())
        return { () throws(PatchSyncError) in try launch(install: folder, command: command) }
    }
}
