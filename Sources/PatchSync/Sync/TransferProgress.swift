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
        /// Where `done` started, and the bytes of responses that arrived since (verified or not yet).
        let start: Int64
        var arrived: Int64 = 0
        /// The `done` last sent: events never go back.
        var shown: Int64 = 0

        /// The event to send now, if one is due: bytes move as they arrive, capped below the total until
        /// what arrived is verified and durable.
        mutating func due() -> SyncEvent? {
            let now = ContinuousClock.now
            let moving = done >= total ? total : min(total - 1, max(done, start + arrived))
            guard done >= total || now - last >= TransferProgress.interval else { return nil }
            last = now
            shown = max(shown, moving)
            return .transfer(TransferStatus(done: shown, total: total, filesDone: filesDone, filesTotal: filesTotal))
        }
    }

    private let state: Mutex<State>
    static let interval = Duration.milliseconds(500)

    init(done: Int64 = 0, total: Int64, filesTotal: Int) {
        state = Mutex(State(done: done, total: total, filesTotal: filesTotal, start: done, shown: done))
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

    /// `bytes` of a response arrived (not verified yet): the event moves with them.
    func received(_ bytes: Int64) -> SyncEvent? {
        state.withLock { state in
            state.arrived += bytes
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
