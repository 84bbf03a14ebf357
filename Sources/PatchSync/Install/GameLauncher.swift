import Foundation
import Logging
import Synchronization

/// What the launcher did about a ready build before starting the game.
public struct LaunchApply: Codable, Sendable {
    /// The apply's report when it ran (applied or nothing ready).
    public var report: ApplyReport?
    /// Why the apply was skipped (the game starts on the current build anyway).
    public var skipped: String?
}

/// Starts the game the way a launcher should: apply a ready build when it can, then run the
/// game with `running.lock` held, `PATCHSYNC_CONTENT_ROOT` pointing at `current` and `PATCHSYNC_BUNDLES`
/// naming the live bundles (comma-separated; also in `live-bundles.json` in the install).
///
/// The game runs in the live build's folder, `builds/<deployment>` (never the folder the launcher was
/// started from, which may be a build the apply just retired), and a relative command with a slash
/// (`./bin/game`, `bin/game`) names a file of that build. The build is read with `running.lock` held,
/// so no apply or rollback swaps it, and none retires its folder to `trash/`, until the game exits:
/// the clean-up that runs beside the game deletes only folders that no launched game uses.
///
/// The game always starts: when another PatchSync process holds the live tree, another instance
/// of the game runs, or the apply fails, the apply is skipped (``LaunchApply/skipped`` says why)
/// and the game runs on the current build, which a failed apply never changes. A sync, plain or
/// discretionary, never holds what the launcher needs; a discretionary one stops when the game starts.
public struct GameLauncher: Sendable {
    public let install: Install
    private static let logger = Logger(label: "patchsync.launch")

    public init(install: Install) { self.install = install }

    /// How a game is started.
    public struct Options: Sendable {
        /// The game's working directory: nil runs it in the folder of the build it starts; a relative
        /// path is inside that build, an absolute one is as given. A relative executable is always a file
        /// of the build.
        public var workingDirectory: String?
        /// Pipes for the game's stdout and stderr (``GameProcess/standardOutput``); otherwise it
        /// shares the launcher's.
        public var captureOutput = false
        /// Variables added to the game's environment (beside PATCHSYNC_CONTENT_ROOT and PATCHSYNC_BUNDLES).
        public var environment: [String: String] = [:]

        public init() {}
    }

    /// Applies a pending update when it can, runs `executable` with `arguments`, and returns its
    /// exit status (128+N for signal N). `applied` is told what happened to the update first.
    public func launch(
        _ executable: String, _ arguments: [String], options: Options = Options(),
        applied: (LaunchApply) -> Void = { _ in }
    ) throws(PatchSyncError) -> Int32 {
        let apply = applyIfPossible()
        applied(apply)
        let (lock, game) = try spawn(executable, arguments, options: options, apply: apply)
        defer { withExtendedLifetime(lock) {} }
        cleanUp()
        return try Self.wait(for: game.pid, executable)
    }

    /// Applies a pending update when it can and starts the game: returns at once with a handle on it
    /// (its pid, its build, ``GameProcess/terminate(_:)``, its exit status, its output). The build it
    /// runs stays in builds/ until it exits. Throws ``PatchSyncError/Reason/notPlayableYet`` (deferred)
    /// while no build is installed yet.
    ///
    /// ```swift
    /// let game = try await GameLauncher(install: install).start("./bin/game", ["--fullscreen"])
    /// print("playing \(game.buildId), pid \(game.pid)")
    /// let status = await game.exitStatus
    /// ```
    public func start(_ executable: String, _ arguments: [String], options: Options = Options())
        async throws(PatchSyncError) -> GameProcess
    {
        let apply = applyIfPossible()
        let (lock, game) = try spawn(executable, arguments, options: options, apply: apply)
        let launcher = self
        game.watch(executable) {
            // The lock lives until the game is reaped: no apply retires its build meanwhile.
            withExtendedLifetime(lock) { launcher.cleanUp() }
        }
        return game
    }

    /// Takes `running.lock` (shared, inherited by the game), reads the live build and spawns the game in it.
    private func spawn(
        _ executable: String, _ arguments: [String], options: Options, apply: LaunchApply
    ) throws(PatchSyncError) -> (RunningLock, GameProcess) {
        // Taken before the build is read: from here until the game exits, its folder stays in builds/.
        let lock = try install.holdRunningLock()
        guard let deployment = install.currentDeployment() else {
            throw PatchSyncError(
                .deferred,
                "\(install.root) has no build installed yet: the game is not playable until its first download is in",
                remedy: "wait for the download to finish (or start one), then play", reason: .notPlayableYet)
        }
        let folder = install.buildDirectory(deployment)
        let directory = options.workingDirectory.map { $0.hasPrefix("/") ? $0 : folder + "/" + $0 } ?? folder
        var environment = ProcessInfo.processInfo.environment.merging(options.environment) { $1 }
        environment["PATCHSYNC_CONTENT_ROOT"] = install.currentLink
        // Which bundles are live: the game may offer what they hold (a language, a DLC) and nothing else.
        environment["PATCHSYNC_BUNDLES"] = install.recordLiveBundles().joined(separator: ",")
        environment["PWD"] = directory  // not the launcher's: the game runs in its build
        let output = options.captureOutput ? (Pipe(), Pipe()) : nil
        let pid = try Self.spawn(
            executable, arguments, in: folder, workingDirectory: directory, environment: environment,
            output: output.map { ($0.0.fileHandleForWriting.fileDescriptor, $0.1.fileHandleForWriting.fileDescriptor) })
        if let output {  // the game holds the write ends now
            try? output.0.fileHandleForWriting.close()
            try? output.1.fileHandleForWriting.close()
        }
        let buildId = (try? install.state(readOnly: true).read().deployed[deployment]?.buildId) ?? deployment
        return (
            lock,
            GameProcess(
                pid: pid, buildId: buildId, folder: folder, workingDirectory: directory, apply: apply,
                standardOutput: output?.0.fileHandleForReading, standardError: output?.1.fileHandleForReading)
        )
    }

    /// The apply, or why it was skipped. On an install with no build yet there is nothing to start
    /// instead, so a busy live tree (another process applying or cleaning up) is waited for, up to
    /// ``firstApplyWait``.
    private func applyIfPossible() -> LaunchApply {
        let start = ContinuousClock.now
        while true {
            do throws(PatchSyncError) {
                return LaunchApply(report: try install.applyForLaunch())
            } catch {
                guard error.code == .deferred, install.currentDeployment() == nil,
                    ContinuousClock.now - start < Self.firstApplyWait
                else {
                    return LaunchApply(skipped: error.description)
                }
                usleep(100_000)
            }
        }
    }

    /// How long a launch with no build installed waits for a busy live tree before giving up.
    static let firstApplyWait = Duration.seconds(30)

    /// While the game runs: deletes the builds an apply retired, at idle priority (the game is already
    /// spawned with the launcher's). None is the game's: its build was read with `running.lock` held, and
    /// builds are retired only with that lock held exclusively. A failure is logged; the next sync or
    /// apply tries again.
    private func cleanUp() {
        _ = Priority.lowerForBackground()
        do throws(PatchSyncError) {
            try Housekeeping(install: install, state: try install.state()).runIfFree()
        } catch {
            Self.logger.notice("cleaning up \(install.root) while the game runs: \(error)")
        }
    }

    /// posix_spawnp of the game with `folder` (its build) as working directory; a bare command name is
    /// searched in PATH as a shell would. Where glibc lacks posix_spawn_file_actions_addchdir_np, `/bin/sh`
    /// changes folder and execs the game.
    static func spawn(
        _ executable: String, _ arguments: [String], in folder: String, workingDirectory: String? = nil,
        environment: [String: String], output: (Int32, Int32)? = nil, throughShell: Bool = addChdir == nil
    ) throws(PatchSyncError) -> pid_t {
        var path = Self.path(of: executable, in: folder)
        let folder = workingDirectory ?? folder
        var argvStrings = [executable] + arguments
        if throughShell {
            // glibc before 2.29: a shell changes folder, then execs the game in its own place. A command it
            // could not run would only say 127: checked here first, so the launcher names it as posix_spawn would.
            if path.contains("/"), access(path, X_OK) != 0 { throw cannotStart(path, in: folder, errno) }
            argvStrings = ["sh", "-c", "cd -- \"$1\" || exit 127; shift; exec \"$@\"", "sh", folder, path] + arguments
            path = "/bin/sh"
        }
        let argv = argvStrings.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for pointer in argv + envp { free(pointer) } }
        var actions = posix_spawn_file_actions_t()
        guard posix_spawn_file_actions_init(&actions) == 0 else { throw cannotStart(path, in: folder, ENOMEM) }
        defer { posix_spawn_file_actions_destroy(&actions) }
        var status: Int32 = 0
        if !throughShell, let addChdir = Self.addChdir { status = addChdir(&actions, folder) }
        if let (out, err) = output, status == 0 {
            status = posix_spawn_file_actions_adddup2(&actions, out, STDOUT_FILENO)
            if status == 0 { status = posix_spawn_file_actions_adddup2(&actions, err, STDERR_FILENO) }
        }
        // The game starts with no signal blocked and every signal at its default, whatever the launcher's
        // thread had (threads of Swift runtimes may block SIGTERM: the game would then ignore terminate()).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        sigdelset(&all, SIGKILL)
        sigdelset(&all, SIGSTOP)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        if status == 0 { status = posix_spawnp(&pid, path, &actions, &attributes, argv, envp) }
        guard status == 0 else { throw cannotStart(path, in: folder, status) }
        return pid
    }

    /// Where the game's command is: a relative path with a slash (`./bin/game`, `bin/game`) is a file of
    /// the build in `folder`, wherever the launcher was started; an absolute path or a bare name is as given.
    static func path(of executable: String, in folder: String) -> String {
        guard executable.contains("/"), !executable.hasPrefix("/") else { return executable }
        return folder + "/" + (executable.hasPrefix("./") ? String(executable.dropFirst(2)) : executable)
    }

    /// Why the game did not start: the command, the build folder and the error posix_spawnp reported.
    private static func cannotStart(_ path: String, in folder: String, _ code: Int32) -> PatchSyncError {
        PatchSyncError(
            .usage, "cannot start the game \(path) in \(folder): \(String(cString: strerror(code)))",
            remedy: "check the command's path (a relative one is inside the build) and that it is executable")
    }

    typealias AddChdir =
        @convention(c) (
            UnsafeMutablePointer<posix_spawn_file_actions_t>?,
            UnsafePointer<CChar>?
        ) -> Int32

    /// glibc's posix_spawn_file_actions_addchdir_np (2.29): the child changes folder before it execs, so the
    /// launcher's own working directory (shared by its threads) never changes. Swift's Glibc module hides it
    /// behind _GNU_SOURCE; looked up once.
    static let addChdir: AddChdir? = {
        let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addchdir_np")
        guard let symbol else { return nil }
        return unsafeBitCast(symbol, to: AddChdir.self)
    }()

    /// waitpid(2) until the game ends; its exit status, or 128+N when signal N ended it.
    static func wait(for pid: pid_t, _ executable: String) throws(PatchSyncError) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw PatchSyncError.wrap(Errno(errno, "waiting for", executable)) }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}

/// A game ``GameLauncher/start(_:_:options:)`` started: its process, the build it runs, and its end.
///
/// Thread-safety: immutable but for the exit status, which a `Mutex` holds once a thread of its own has
/// reaped the game.
public final class GameProcess: Sendable {
    public let pid: pid_t
    /// The build the game runs (its id, as the publisher named it).
    public let buildId: String
    /// The build's folder, and the folder the game runs in.
    public let folder: String
    public let workingDirectory: String
    /// What the launcher did about a ready build before the game started.
    public let apply: LaunchApply
    /// The game's stdout and stderr, with ``GameLauncher/Options/captureOutput``.
    public let standardOutput: FileHandle?
    public let standardError: FileHandle?

    private let ended = Mutex<(status: Int32?, waiters: [CheckedContinuation<Int32, Never>])>((nil, []))

    init(
        pid: pid_t, buildId: String, folder: String, workingDirectory: String, apply: LaunchApply,
        standardOutput: FileHandle?, standardError: FileHandle?
    ) {
        self.pid = pid
        self.buildId = buildId
        self.folder = folder
        self.workingDirectory = workingDirectory
        self.apply = apply
        self.standardOutput = standardOutput
        self.standardError = standardError
    }

    /// Reaps the game on a thread of its own (waitpid blocks), running `meanwhile` first.
    func watch(_ executable: String, meanwhile: @escaping @Sendable () -> Void) {
        let pid = self.pid
        Thread.detachNewThread { [self] in
            meanwhile()
            let status = (try? GameLauncher.wait(for: pid, executable)) ?? 1
            let waiters = ended.withLock { state -> [CheckedContinuation<Int32, Never>] in
                state.status = status
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(returning: status) }
        }
    }

    /// Whether the game still runs.
    public var isRunning: Bool { ended.withLock { $0.status == nil } }

    /// Sends `signal` (SIGTERM by default) to the game while it runs.
    public func terminate(_ signal: Int32 = SIGTERM) {
        ended.withLock { if $0.status == nil { kill(pid, signal) } }
    }

    /// The game's exit status once it has ended (128+N when signal N ended it).
    public var exitStatus: Int32 {
        get async {
            await withCheckedContinuation { continuation in
                let status = ended.withLock { state -> Int32? in
                    if state.status == nil { state.waiters.append(continuation) }
                    return state.status
                }
                if let status { continuation.resume(returning: status) }
            }
        }
    }
}
