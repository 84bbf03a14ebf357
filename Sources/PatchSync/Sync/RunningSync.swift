import Foundation
import Synchronization

/// A sync as it runs, for `status` in another process: the running sync writes it to state.db
/// about once a second and removes it when it ends.
public struct RunningSync: Codable, Sendable, Equatable {
    public var pid: Int32
    /// When its process started (``ProcessIdentity``): a later process given the same pid is not it.
    public var processStart: UInt64?
    public var startedAt: Date
    public var updatedAt: Date
    /// Compressed bytes fetched of those the whole update needs (of the step's, when no update total is known).
    public var bytesDone: Int64
    public var bytesTotal: Int64
    /// Over the last few seconds.
    public var bytesPerSecond: Int64
    /// Seconds left at that rate; nil before any rate is known.
    public var etaSeconds: Int64?
    /// Set while requests wait with no byte arriving (the rate is then 0).
    public var stalled: Bool?
    /// A background (`--discretionary`) sync: a foreground one takes over from it.
    public var discretionary: Bool?
    /// The step downloading now (one more bundle each), and its bundles (see ``TransferStatus``).
    public var stepBytesDone: Int64?
    public var stepBytesTotal: Int64?
    public var bundles: [String]?
    public var bundleBytesDone: Int64?
    public var bundleBytesTotal: Int64?

    /// The recorded sync, if its process still runs (a killed one leaves its record behind).
    static func alive(_ running: RunningSync?, now: Date = Date()) -> RunningSync? {
        guard var running, ProcessIdentity(pid: running.pid, startTicks: running.processStart).isRunning else { return nil }
        // A record not written for a few seconds is a sync whose bytes stopped: no rate to trust.
        if now.timeIntervalSince(running.updatedAt) > 3 {
            running.bytesPerSecond = 0
            running.etaSeconds = nil
        }
        return running
    }

    /// Writes a sync's progress as its events come.
    ///
    /// Thread-safety: `progress` is a Mutex; events come from any thread.
    final class Recorder: Sendable {
        private let state: StateStore
        private struct Progress {
            var record: RunningSync
            var lastWrite = ContinuousClock.now
            var samples: [(at: ContinuousClock.Instant, done: Int64)] = []
        }
        private let progress: Mutex<Progress>
        /// The window of the rate, seconds.
        static let window = Duration.seconds(5)

        init(state: StateStore, discretionary: Bool = false) {
            self.state = state
            let now = Date()
            var record = RunningSync(
                pid: getpid(), startedAt: now, updatedAt: now, bytesDone: 0, bytesTotal: 0,
                bytesPerSecond: 0, etaSeconds: nil)
            record.discretionary = discretionary ? true : nil
            record.processStart = ProcessIdentity.current.startTicks
            progress = Mutex(Progress(record: record))
            write(record)
        }

        func note(_ event: SyncEvent) {
            if case .stalled = event {
                // Another process's `status` shows the truth: nothing moves.
                let record = progress.withLock { p -> RunningSync in
                    p.samples = []
                    p.record.bytesPerSecond = 0
                    p.record.etaSeconds = nil
                    p.record.stalled = true
                    p.record.updatedAt = Date()
                    return p.record
                }
                write(record)
                return
            }
            guard case .transfer(let status) = event else { return }
            // The rate and the ETA on the update's scale when there is one: it never restarts at a step.
            let (done, total) = (status.updateDone ?? status.done, status.updateTotal ?? status.total)
            let now = status.countedAt ?? ContinuousClock.now
            let due: RunningSync? = progress.withLock { p in
                p.samples.append((now, done))
                p.samples.removeAll { now - $0.at > Self.window }
                let first = p.samples[0]
                let seconds = (now - first.at) / .seconds(1)
                if seconds > 0.2 { p.record.bytesPerSecond = Int64(Double(done - first.done) / seconds) }
                p.record.bytesDone = done
                p.record.bytesTotal = total
                p.record.stepBytesDone = status.done
                p.record.stepBytesTotal = status.total
                p.record.bundles = status.bundles
                p.record.bundleBytesDone = status.bundleDone
                p.record.bundleBytesTotal = status.bundleTotal
                p.record.stalled = nil
                p.record.updatedAt = Date()
                p.record.etaSeconds = p.record.bytesPerSecond > 0 ? Int64((Double(total - done) / Double(p.record.bytesPerSecond)).rounded(.up)) : nil
                guard now - p.lastWrite >= .seconds(1) || done >= total else { return nil }
                p.lastWrite = now
                return p.record
            }
            if let due { write(due) }
        }

        /// Removes the record (progress is best effort: a failure to write it never fails the sync).
        func end() { try? state.update { $0.recordRunning(nil) } }

        private func write(_ record: RunningSync) {
            try? state.update { $0.recordRunning(record) }
        }
    }
}
