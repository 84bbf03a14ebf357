import ArgumentParser
import Foundation
import PatchSync

struct Launch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply a ready build, then run the game while holding running.lock.",
        discussion: """
            The game runs with PATCHSYNC_CONTENT_ROOT set to the install's `current` folder and \
            its own arguments; launch returns the game's exit status (128+N when killed by signal N). \
            Its working directory is the folder of the build it starts (builds/<build>), and a \
            relative command (./bin/game) is a file of that build, whatever folder launch runs in. \
            The game always starts: when the ready build cannot be applied now (another PatchSync \
            process changes the live build, another instance of the game runs, the apply fails), \
            launch says why on stderr (with --json, as an "apply" event line on --events-fd) and runs \
            the current build. A discretionary sync stops when the game starts. \
            While the game runs, apply and rollback refuse to swap the tree.

            Examples:
              patchsync launch --install ~/Games/forest -- ./bin/game --fullscreen
              patchsync launch --install ~/Games/forest --json --events-fd 3 -- ./bin/game 3>launch.jsonl
            """)

    @OptionGroup var options: ClientOptions

    @Option(
        name: .customLong("cwd"),
        help: ArgumentHelp(
            "The game's working directory: relative to the build's folder, or absolute (default: the build's folder).",
            valueName: "dir"))
    var workingDirectory: String?

    @Option(
        help: ArgumentHelp(
            "With --json, the file descriptor launch writes its JSON lines to (the apply event, then the result with the game's exit status); the game keeps stdout.",
            valueName: "fd"))
    var eventsFd: Int32 = STDERR_FILENO

    @Argument(parsing: .postTerminator, help: "The game command and its arguments, after --.")
    var command: [String] = []

    func validate() throws {
        guard !command.isEmpty else {
            throw ValidationError("no game command given: put it after --: patchsync launch -- ./game")
        }
        guard fcntl(eventsFd, F_GETFD) != -1 else {
            throw ValidationError(
                "--events-fd \(eventsFd) is not an open file descriptor: open it in the calling process (3>events.jsonl), or leave it out for stderr"
            )
        }
    }

    func run() async throws {
        if options.json { Output.send(to: eventsFd) }
        var launch = GameLauncher.Options()
        launch.workingDirectory = workingDirectory
        let status = try Self.launch(install: options.install, command: command, options: launch, json: options.json)
        if options.json {
            struct Ended: Encodable { var exitStatus: Int32 }
            Output(json: true).result(Ended(exitStatus: status), human: "")
        }
        throw ExitCode(status)
    }

    static func launch(
        install folder: String, command: [String], options: GameLauncher.Options = .init(), json: Bool = false
    ) throws(PatchSyncError) -> Int32 {
        guard let executable = command.first else {
            throw PatchSyncError(.usage, "no game command given", remedy: "put it after --: patchsync launch -- ./game")
        }
        try actAsOwner(of: folder)
        let install = try Install.open(at: folder)
        return try GameLauncher(install: install).launch(executable, Array(command.dropFirst()), options: options) {
            outcome in
            if json {
                struct Event: Encodable {
                    var event = "apply"
                    var message: String
                    var applied: Bool
                    var current: String?
                    var skipped: String?
                }
                let applied = outcome.report?.applied ?? false
                let message =
                    outcome.skipped.map { "starting the current build without applying: \($0)" }
                    ?? (applied
                        ? "applied build \(outcome.report?.current ?? "?")"
                        : "no build is ready; starting the current one")
                Output.line(
                    Output.stamped(
                        Event(
                            message: message, applied: applied, current: outcome.report?.current,
                            skipped: outcome.skipped),
                        phase: "applying"))
                Output.enter("playing")
            } else if let skipped = outcome.skipped {
                FileHandle.standardError.write(
                    Data("patchsync: starting the current build without applying: \(skipped)\n".utf8))
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
