import Foundation
import Synchronization

/// Bytes and files done out of a sync's totals, as `.transfer` events: one every 0.4 s while bytes come (so
/// that one reaches the consumer at least every half second, sent at the sync's next 0.1 s tick), one a
/// second while they stop (a heartbeat, until the sync is told stalled), and always the one that reaches
/// the total. The delta pack and the chunks after it count on one scale, so `done` only grows and a rate
/// taken over it stays true.
///
/// Thread-safety: a `Mutex` holds the counters; any thread adds.
final class TransferProgress: Sendable {
    private struct State {
        var done: Int64
        let total: Int64
        var filesDone = 0
        let filesTotal: Int
        var last: ContinuousClock.Instant
        /// Where `done` started, and the bytes of responses that arrived since (verified or not yet).
        let start: Int64
        var arrived: Int64 = 0
        /// The `done` last sent: events never go back.
        var shown: Int64 = 0

        /// The event to send now, if one is due: bytes move as they arrive, capped below the total until
        /// what arrived is verified and durable.
        mutating func due(_ id: Int, now: ContinuousClock.Instant) -> SyncEvent? {
            let moving = done >= total ? total : min(total - 1, max(done, start + arrived))
            guard done >= total || now - last >= TransferProgress.interval else { return nil }
            shown = max(shown, moving)
            return event(id, now: now)
        }

        /// The counts shown, as of `now`.
        mutating func event(_ id: Int, now: ContinuousClock.Instant) -> SyncEvent {
            last = now
            var status = TransferStatus(done: shown, total: total, filesDone: filesDone, filesTotal: filesTotal)
            status.progress = id
            status.countedAt = now
            return .transfer(status)
        }
    }

    private let state: Mutex<State>
    static let interval = Duration.milliseconds(400)
    /// With no event for this long (bytes stopped), the counts as they stand go out again.
    static let heartbeatInterval = Duration.seconds(1)
    /// This progress's number: each one made gets a higher one, so a late event of an earlier step is known.
    let id = TransferProgress.made.add(1, ordering: .relaxed).newValue
    private static let made = Atomic<Int>(0)

    /// Where the time of the events comes from: the continuous clock, or a test's.
    private let clock: @Sendable () -> ContinuousClock.Instant

    init(
        done: Int64 = 0, total: Int64, filesTotal: Int,
        clock: @escaping @Sendable () -> ContinuousClock.Instant = { .now }
    ) {
        self.clock = clock
        state = Mutex(
            State(done: done, total: total, filesTotal: filesTotal, last: clock(), start: done, shown: done))
    }

    /// The bytes done so far.
    var bytesDone: Int64 { state.withLock { $0.done } }

    /// `bytes` and `files` more are done.
    func add(_ bytes: Int64, files: Int = 0) -> SyncEvent? {
        state.withLock { state in
            state.done += bytes
            state.filesDone += files
            return state.due(id, now: clock())
        }
    }

    /// `bytes` of a response arrived (not verified yet): the event moves with them.
    func received(_ bytes: Int64) -> SyncEvent? {
        state.withLock { state in
            state.arrived += bytes
            return state.due(id, now: clock())
        }
    }

    /// The counts as they stand, counted at `now`, when no event went out for ``heartbeatInterval`` and the step
    /// is not done: the reader sees the sync live while bytes stop, and a rate taken over the events falls.
    func heartbeat(now: ContinuousClock.Instant = .now) -> SyncEvent? {
        state.withLock { state -> SyncEvent? in
            guard state.done < state.total, now - state.last >= Self.heartbeatInterval else { return nil }
            return state.event(id, now: now)
        }
    }

    /// `done` bytes are done in all (never fewer than before).
    func set(_ done: Int64) -> SyncEvent? {
        state.withLock { state in
            state.done = max(state.done, done)
            return state.due(id, now: clock())
        }
    }
}

/// A sync's transfer statuses put in order as they go out, whichever thread sent them: a late one of a
/// step that has ended (an earlier ``TransferProgress``) is dropped, and within a step the counts never
/// go back (a status made before the step's last, sent after it, shows the last's counts).
struct TransferOrder {
    private var last = TransferStatus(done: 0, total: 0)

    /// The status to send, or nil to send none.
    mutating func admit(_ status: TransferStatus) -> TransferStatus? {
        var status = status
        let (id, latest) = (status.progress ?? 0, last.progress ?? 0)
        if id < latest { return nil }
        if id == latest {
            status.done = max(status.done, last.done)
            status.filesDone = max(status.filesDone, last.filesDone)
        }
        last = status
        return status
    }
}
