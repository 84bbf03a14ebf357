import Foundation

/// Bytes and files done out of a sync's totals, as `.transfer` events: at most one every half second,
/// and always the one that reaches the total. The delta pack and the chunks after it count on one
/// scale, so `done` only grows and a rate taken over it stays true.
///
/// Thread-safety: `lock` guards the counters.
final class TransferProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var done: Int64
    private let total: Int64
    private var filesDone = 0
    private let filesTotal: Int
    private var last = ContinuousClock.now
    static let interval = Duration.milliseconds(500)

    init(done: Int64 = 0, total: Int64, filesTotal: Int) {
        self.done = done
        self.total = total
        self.filesTotal = filesTotal
    }

    /// The bytes done so far.
    var bytesDone: Int64 { lock.withLock { done } }

    /// `bytes` and `files` more are done.
    func add(_ bytes: Int64, files: Int = 0) -> SyncEvent? {
        lock.withLock {
            done += bytes
            filesDone += files
            return due()
        }
    }

    /// `done` bytes are done in all (never fewer than before).
    func set(_ done: Int64) -> SyncEvent? {
        lock.withLock {
            self.done = max(self.done, done)
            return due()
        }
    }

    private func due() -> SyncEvent? {
        let now = ContinuousClock.now
        guard done >= total || now - last >= Self.interval else { return nil }
        last = now
        return .transfer(done: done, total: total, filesDone: filesDone, filesTotal: filesTotal)
    }
}
