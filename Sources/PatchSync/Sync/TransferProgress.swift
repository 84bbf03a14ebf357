import Foundation
import Synchronization

/// Bytes and files done out of a sync's totals, as `.transfer` events: at most one every half second,
/// and always the one that reaches the total. The delta pack and the chunks after it count on one
/// scale, so `done` only grows and a rate taken over it stays true.
///
/// Thread-safety: a `Mutex` holds the counters; any thread adds.
final class TransferProgress: Sendable {
    private struct State {
        var done: Int64
        let total: Int64
        var filesDone = 0
        let filesTotal: Int
        var last = ContinuousClock.now

        /// The event to send now, if one is due.
        mutating func due() -> SyncEvent? {
            let now = ContinuousClock.now
            guard done >= total || now - last >= TransferProgress.interval else { return nil }
            last = now
            return .transfer(done: done, total: total, filesDone: filesDone, filesTotal: filesTotal)
        }
    }

    private let state: Mutex<State>
    static let interval = Duration.milliseconds(500)

    init(done: Int64 = 0, total: Int64, filesTotal: Int) {
        state = Mutex(State(done: done, total: total, filesTotal: filesTotal))
    }

    /// The bytes done so far.
    var bytesDone: Int64 { state.withLock { $0.done } }

    /// `bytes` and `files` more are done.
    func add(_ bytes: Int64, files: Int = 0) -> SyncEvent? {
        state.withLock { state in
            state.done += bytes
            state.filesDone += files
            return state.due()
        }
    }

    /// `done` bytes are done in all (never fewer than before).
    func set(_ done: Int64) -> SyncEvent? {
        state.withLock { state in
            state.done = max(state.done, done)
            return state.due()
        }
    }
}
