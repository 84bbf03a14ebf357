import Foundation

/// Starts the game the way a launcher should: apply a ready build first, then run
/// the game with `running.lock` held and `PATCHSYNC_CONTENT_ROOT` pointing at `current`.
public struct GameLauncher: Sendable {
    public let install: Install

    public init(install: Install) { self.install = install }

    /// Applies a pending update (unless another instance of the game runs), runs
    /// `executable` with `arguments`, and returns its exit status (128+N for signal N).
    public func launch(_ executable: String, _ arguments: [String],
                       applied: (ApplyReport) -> Void = { _ in }) throws(PatchSyncError) -> Int32 {
        if !install.gameIsRunning() { applied(try install.applyPendingUpdate()) }
        guard install.currentDeployment() != nil else {
            throw PatchSyncError(.usage, "\(install.root) has no build installed yet",
                                 remedy: "run `patchsync sync --install \(install.root)` first")
        }
        let lock = try install.holdRunningLock()
        defer { withExtendedLifetime(lock) {} }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.resolve(executable))
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["PATCHSYNC_CONTENT_ROOT"] = install.currentLink
        process.environment = environment
        do { try process.run() } catch {
            throw PatchSyncError(.usage, "cannot start the game \(executable)", remedy: "check the command's path",
                                 cause: error)
        }
        process.waitUntilExit()
        return process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    }

    /// A command name without a slash is looked up in PATH, as a shell would.
    private static func resolve(_ command: String) -> String {
        guard !command.contains("/") else { return command }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        where FileManager.default.isExecutableFile(atPath: "\(dir)/\(command)") { return "\(dir)/\(command)" }
        return command
    }
}
