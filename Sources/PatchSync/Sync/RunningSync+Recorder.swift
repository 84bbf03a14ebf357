import Foundation
import Synchronization

extension RunningSync {
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
                p.record.etaSeconds =
                    p.record.bytesPerSecond > 0
                    ? Int64((Double(total - done) / Double(p.record.bytesPerSecond)).rounded(.up)) : nil
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
