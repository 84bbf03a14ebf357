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
        var environment = ProcessInfo.processInfo.environment
        environment["PATCHSYNC_CONTENT_ROOT"] = install.currentLink
        let pid = try Self.spawn(executable, arguments, environment: environment)
        return try Self.wait(for: pid, executable)
    }

    /// posix_spawnp of the game, searching PATH for a bare command name as a shell would.
    private static func spawn(_ executable: String, _ arguments: [String],
                              environment: [String: String]) throws(PatchSyncError) -> pid_t {
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        let status = posix_spawnp(&pid, executable, nil, nil, argv, envp)
        guard status == 0 else {
            throw PatchSyncError(.usage, "cannot start the game \(executable): \(String(cString: strerror(status)))",
                                 remedy: "check the command's path and that it is executable")
        }
        return pid
    }

    /// waitpid(2) until the game ends; its exit status, or 128+N when signal N ended it.
    private static func wait(for pid: pid_t, _ executable: String) throws(PatchSyncError) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw PatchSyncError.wrap(Errno(errno, "waiting for", executable)) }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}
