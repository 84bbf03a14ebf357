import Foundation

/// Named instants inside the state transitions, where a test kills the process to show that a
/// kill at any of them loses nothing: with `PATCHSYNC_CRASH_AT=<name>` in its environment, a
/// process sends itself SIGKILL on reaching that point. Without the variable a point costs one
/// comparison.
enum CrashPoint: String, CaseIterable, Sendable {
    /// Sync recorded the deployment it stages (and the sequence seen).
    case stagingBegun
    /// Sync recorded the staged deployment as ready.
    case stagingFinished
    /// Apply moved the staged tree into builds/, before the flip.
    case applyMoved
    /// Apply flipped `current`, before recording it.
    case applyFlipped
    /// Apply recorded the new current build, before retiring old ones.
    case applyRecorded
    /// Rollback flipped `current`, before recording it.
    case rollbackFlipped
    /// Apply or sync moved retired builds to trash/, before emptying it.
    case retired

    private static let armed = ProcessInfo.processInfo.environment["PATCHSYNC_CRASH_AT"]

    /// Kills the process when this is the armed point.
    func reached() {
        if Self.armed == rawValue { kill(getpid(), SIGKILL) }
    }
}
