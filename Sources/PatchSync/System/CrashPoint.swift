import Foundation
import Synchronization

/// Named instants inside the state transitions, where a test kills the process to show that a
/// kill at any of them loses nothing: with `PATCHSYNC_CRASH_AT=<name>` in its environment, a
/// process sends itself SIGKILL on reaching that point; `<name>@<n>` kills at its n-th reaching.
/// Without the variable a point costs one comparison.
enum CrashPoint: String, CaseIterable, Sendable {
    /// Sync recorded the deployment it stages (and the sequence seen).
    case stagingBegun
    /// Sync wrote a batch of chunks to staged files and is about to sync and record them.
    case batchWritten
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
    /// Publish stored every new object, before putting the last ones in place and signing its manifest.
    case publishStored
    /// A writer to a bucket sent its content and versioned metadata, before the commit (timestamp.json).
    case bucketMetadataSent

    private static let armed: (name: String, at: Int)? = {
        guard let text = ProcessInfo.processInfo.environment["PATCHSYNC_CRASH_AT"] else { return nil }
        let parts = text.split(separator: "@", maxSplits: 1)
        return (String(parts.first ?? ""), parts.count == 2 ? Int(parts[1]) ?? 1 : 1)
    }()
    private static let reachings = Mutex(0)

    /// Kills the process when this is the armed point (at its armed reaching).
    func reached() {
        guard let armed = Self.armed, armed.name == rawValue else { return }
        if Self.reachings.withLock({ count in
            count += 1
            return count
        }) >= armed.at {
            kill(getpid(), SIGKILL)
        }
    }
}
