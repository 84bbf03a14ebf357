import Foundation

/// The one public error of the PatchSync library.
///
/// Every error that leaves the library is one of these: a stable ``Code`` that
/// callers (and the command line's exit status) act on, a message that names
/// the thing (path, URL, build id) and keeps the step, a remedy, and the cause.
public struct PatchSyncError: Error, CustomStringConvertible, Sendable {
    /// What kind of failure this is; each maps to one exit status.
    public enum Code: String, Sendable, CaseIterable {
        /// The caller asked for something malformed (bad flag, bad argument).
        case usage
        /// Data was refused: bad signature, hash, manifest, rollback, expiry, path.
        case refusedData
        /// No mirror could serve what was needed.
        case originUnavailable
        /// A local file system or disk error.
        case localIO
        /// Conditions do not allow the work now; progress is kept.
        case deferred
        /// A bug or an unexpected state.
        case `internal`
    }

    /// Why, in a word a user interface can switch on: every deferred error has one, and so do a full
    /// disk and a launch before the first build is in.
    public enum Reason: String, Codable, Sendable, CaseIterable {
        /// The caller stopped it (``SyncSession/cancel()``, a launcher's pause button).
        case playerPaused
        /// The game runs: a discretionary sync, an apply or a rollback waits for it to exit.
        case gameRunning
        /// Another sync runs on this install (`sync --attach` follows it).
        case otherSync
        /// Another PatchSync process holds what this one needs (an apply, a clean-up, a publish).
        case busy
        case onBattery
        case metered
        case playHours
        /// A signal (SIGTERM, SIGINT) asked it to stop.
        case stopped
        /// The deadline (`--deadline`, `--for`) came.
        case deadline
        /// A discretionary run backs off after deferred runs.
        case backingOff
        /// The disk cannot hold what is being written (``PatchSyncError/requiredBytes``,
        /// ``PatchSyncError/availableBytes``).
        case diskFull
        /// No build is installed yet: the first sync has not finished.
        case notPlayableYet
        /// No byte arrived for the `giveUp` time.
        case stalled
        /// The build is preloaded and its release has not come yet.
        case notReleasedYet
        /// The publisher withdrew the channel's last build: nothing to install until it publishes again.
        case withdrawn
    }

    public var code: Code
    public var message: String
    public var remedy: String?
    public var cause: String?
    public var reason: Reason?
    /// With ``Reason/diskFull``: the bytes the work needs and the bytes free on that disk.
    public var requiredBytes: Int64?
    public var availableBytes: Int64?

    public init(
        _ code: Code, _ message: String, remedy: String? = nil, cause: (any Error)? = nil, reason: Reason? = nil
    ) {
        self.code = code
        self.message = message
        self.remedy = remedy
        self.cause = cause.map { String(describing: $0) }
        self.reason = reason
    }

    public var description: String {
        cause.map { "\(message): \($0)" } ?? message
    }

    /// What happened and what to do, for a player: no command lines, no paths (``remedy`` is for the
    /// person running the command line).
    public var advice: String {
        switch reason {
        case .diskFull:
            let need = (requiredBytes ?? 0) - (availableBytes ?? 0)
            return "There is not enough disk space for the update"
                + (need > 0 ? ": free \(ByteCount.format(need)) and try again." : ". Free some space and try again.")
        case .notPlayableYet: return "The game is still downloading. It can be played once the download is done."
        case .gameRunning: return "The game is running; the update is installed when it closes."
        case .otherSync: return "Another download of this game is running; it goes on."
        case .busy: return "The game's files are busy for a moment. Try again shortly."
        case .playerPaused: return "The download is paused. Resume it to go on where it stopped."
        case .stalled:
            return
                "The download stopped: the server does not answer. Check your internet connection; it goes on where it stopped."
        case .onBattery: return "The download waits until the computer is plugged in."
        case .metered: return "The download waits for a network that is not metered."
        case .playHours: return "The download waits until your play time is over."
        case .deadline, .stopped, .backingOff:
            return "The download stopped for now; it goes on where it stopped next time."
        case .notReleasedYet: return "The new version is downloaded and unlocks at its release time."
        case .withdrawn: return "The publisher took this version of the game down for now. Try again later."
        case nil: break
        }
        switch code {
        case .originUnavailable:
            return "The download server can't be reached. Check your internet connection and try again."
        case .refusedData:
            return "The update did not pass its security check and was not installed. Your game is unchanged."
        case .localIO:
            return "The game's files could not be written. Check the disk and try again; your game is unchanged."
        case .deferred: return "The download will go on later."
        case .usage, .internal: return "Something went wrong (\(message)). Please report it."
        }
    }

    /// The same error with a step prepended to its message: `applying 1.2: <message>`.
    public func during(_ step: String) -> PatchSyncError {
        var copy = self
        copy.message = "\(step): \(message)"
        return copy
    }
}

extension PatchSyncError {
    /// Runs `body`, prefixing any PatchSyncError it throws with `step`, and wrapping others.
    static func step<T>(_ step: String, _ body: () throws(PatchSyncError) -> T) throws(PatchSyncError) -> T {
        do { return try body() } catch { throw error.during(step) }
    }

    /// A sync stopped by its caller: deferred, with progress kept.
    static let cancelled = PatchSyncError(
        .deferred, "the download was paused; what was already downloaded and checked is kept",
        remedy: "resume the download to continue where it stopped", reason: .playerPaused)

    /// The disk cannot hold what is to be written: both counts said, and what to do.
    static func diskFull(_ message: String, required: Int64, available: Int64) -> PatchSyncError {
        var error = PatchSyncError(
            .localIO, message,
            remedy: "free at least \(ByteCount.format(max(1, required - available))) on that disk, then try again; "
                + "the game as installed is untouched and the download goes on where it stopped",
            reason: .diskFull)
        error.requiredBytes = required
        error.availableBytes = available
        return error
    }

    /// Turns any error into a PatchSyncError: typed low-level errors keep their meaning.
    static func wrap(_ error: any Error) -> PatchSyncError {
        switch error {
        case let e as PatchSyncError: return e
        case is CancellationError: return cancelled
        case let e as Errno:
            return PatchSyncError(
                .localIO, e.description, remedy: e.remedy,
                reason: e.code == ENOSPC || e.code == EDQUOT ? .diskFull : nil)
        default: return PatchSyncError(.internal, String(describing: error))
        }
    }
}
