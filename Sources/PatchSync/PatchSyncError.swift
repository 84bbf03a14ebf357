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
    }

    public var code: Code
    public var message: String
    public var remedy: String?
    public var cause: String?
    public var reason: Reason?
    /// With ``Reason/diskFull``: the bytes the work needs and the bytes free on that disk.
    public var requiredBytes: Int64?
    public var availableBytes: Int64?

    public init(_ code: Code, _ message: String, remedy: String? = nil, cause: (any Error)? = nil, reason: Reason? = nil) {
        self.code = code
        self.message = message
        self.remedy = remedy
        self.cause = cause.map { String(describing: $0) }
        self.reason = reason
    }

    public var description: String {
        cause.map { "\(message): \($0)" } ?? message
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
            return PatchSyncError(.localIO, e.description, remedy: e.remedy, reason: e.code == ENOSPC || e.code == EDQUOT ? .diskFull : nil)
        default: return PatchSyncError(.internal, String(describing: error))
        }
    }
}
