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

    public var code: Code
    public var message: String
    public var remedy: String?
    public var cause: String?

    public init(_ code: Code, _ message: String, remedy: String? = nil, cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.remedy = remedy
        self.cause = cause.map { String(describing: $0) }
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
        .deferred, "the sync was cancelled; the chunks already verified are kept",
        remedy: "run sync again to continue where it stopped")

    /// Turns any error into a PatchSyncError: typed low-level errors keep their meaning.
    static func wrap(_ error: any Error) -> PatchSyncError {
        switch error {
        case let e as PatchSyncError: return e
        case is CancellationError: return cancelled
        case let e as Errno: return PatchSyncError(.localIO, e.description, remedy: e.remedy)
        default: return PatchSyncError(.internal, String(describing: error))
        }
    }
}
