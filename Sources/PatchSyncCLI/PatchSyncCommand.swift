import ArgumentParser
import Foundation
import Logging
import PatchSync

/// `patchsync`: the command line of PatchSync.
public struct PatchSyncCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "patchsync",
        abstract: "Keep a game's installed assets in step with the build its publisher released.",
        discussion: """
            Publisher:  keygen, repo init, publish, upload, repo refresh, repo prune, diff, manifest show
            Player:     init, sync, apply, launch, rollback, verify, status, bundles

            Exit status: 0 done, 64 usage, 65 refused data, 69 origin unavailable, \
            74 local I/O error, 75 deferred (try again later), 1 internal error.

            Example:
              patchsync init --install ~/Games/forest --remote https://cdn.example.com/forest --root root.json
              patchsync sync --install ~/Games/forest && patchsync apply --install ~/Games/forest
            """,
        version: "patchsync \(PatchSyncVersion.current) (manifest format \(Manifest.formatVersion))",
        subcommands: [
            Keygen.self, RepoCommand.self, Publish.self, Upload.self, Diff.self, Init.self, Sync.self, Apply.self,
            Launch.self,
            Rollback.self, Verify.self, Status.self, BundlesCommand.self, ConfigCommand.self, Share.self,
            ManifestCommand.self
        ]
    )

    public init() {}

    /// Parses, runs, and exits with the status of DESIGN.md's table.
    public static func runMain() async {
        let level =
            ProcessInfo.processInfo.environment["PATCHSYNC_LOG"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let json = CommandLine.arguments.contains("--json")
        if let launch = Launch.fastPath(CommandLine.arguments) {
            // The launcher's hot path skips the argument parser's reflection: it runs before every game start.
            do { Foundation.exit(try launch()) } catch {
                Output(json: false).failure(error, exitStatus: ExitStatus.of(error.code))
                Foundation.exit(ExitStatus.of(error.code))
            }
        }
        do {
            var command = try await asyncParseAsRoot()
            Output.begin(command: Self.name(of: command))
            Output.enter(Self.phase(of: Self.name(of: command)))
            if var async = command as? AsyncParsableCommand { try await async.run() } else { try command.run() }
        } catch let error as PatchSyncError {
            let status = ExitStatus.of(error.code)
            Output(json: json).failure(error, exitStatus: status)
            Foundation.exit(status)
        } catch {
            // The parser's own refusals (a bad option, a missing argument) are errors a machine reads too.
            let status = exitCode(for: error).rawValue
            if json, status != 0, !(error is ExitCode) {
                let message =
                    (fullMessage(for: error).split(separator: "\n").first.map(String.init) ?? "invalid arguments")
                    .replacingOccurrences(of: "Error: ", with: "")
                Output(json: true).failure(
                    PatchSyncError(.usage, message, remedy: "see `patchsync help` for the commands and their options"),
                    exitStatus: status)
                Foundation.exit(status)
            }
            exit(withError: error)
        }
    }

    /// The command as typed: "sync", "repo promote", "bundles add".
    static func name(of command: any ParsableCommand) -> String {
        let type = Swift.type(of: command)
        let name = type._commandName
        for group in [RepoCommand.self, BundlesCommand.self, ConfigCommand.self, ManifestCommand.self]
            as [any ParsableCommand.Type]
        where group.configuration.subcommands.contains(where: { $0 == type }) {
            return group._commandName + " " + name
        }
        return name
    }

    /// The phase a command's lines come from until it says otherwise.
    static func phase(of command: String) -> String {
        switch command {
        case "sync": return "starting"
        case "publish", "repo promote", "repo rollback", "repo withdraw", "repo release", "repo refresh", "repo renew",
            "repo rotate-root", "repo init", "repo prune":
            return "publishing"
        case "upload": return "uploading"
        case "verify": return "verifying"
        case "apply", "rollback", "launch": return "applying"
        default: return "working"
        }
    }
}
