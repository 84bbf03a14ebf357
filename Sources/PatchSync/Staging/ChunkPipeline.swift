import Foundation

/// Inflates, hashes and writes fetched chunks on worker threads, so the transfer thread only
/// copies bytes and the network never waits for the CPU while a core is free.
///
/// The queue is bounded in bytes: when the workers fall behind, `submit` blocks the transfer
/// thread (which stops reading sockets, and TCP slows the senders), so memory stays bounded
/// whatever the build size.
///
/// Thread-safety: a ``ConditionLock`` holds the queue and the counters, and is what the transfer
/// thread (queue full) and the workers (queue empty) wait on; each worker owns its buffer.
final class ChunkPipeline: Sendable {
    /// One chunk's stored bytes, owned by the job until a worker has finished with it.
    struct Job {
        var need: Plan.Need
        var stored: UnsafeMutableRawBufferPointer
        var results: ChunkSink.Results
        var index: Int
    }

    /// What the workers and the submitter share.
    private struct State {
        var queue: [Job] = []
        var head = 0
        var queuedBytes = 0
        var stopping = false
        /// The file each worker's current chunk goes to (first destination), so that another worker
        /// picks a chunk of a different file when the queue has one: two threads writing one file
        /// contend for its inode lock, and the kernel spins the waiter on a core the other could use.
        var inProgress: [String?]
        /// Workers not yet ended.
        var running: Int
    }

    private let files: StagedFiles
    private let capacityBytes: Int
    private let lock: ConditionLock<State>
    /// How far past the head a worker looks for a chunk of another file.
    private static let lookahead = 16

    /// Starts `workers` threads sharing a queue of at most `capacityBytes` stored bytes.
    init(
        files: StagedFiles, workers: Int = ProcessInfo.processInfo.activeProcessorCount,
        capacityBytes: Int = 32 << 20
    ) {
        self.files = files
        self.capacityBytes = capacityBytes
        let workerCount = max(1, min(workers, 8))
        lock = ConditionLock(State(inProgress: Array(repeating: nil, count: workerCount), running: workerCount))
        for number in 0..<workerCount {
            let thread = Thread { [self] in work(number) }
            thread.name = "patchsync-verify-\(number)"
            thread.start()
        }
    }

    /// Queues a chunk; blocks while the queue is full (never when it is empty, so any chunk fits).
    func submit(_ job: Job) {
        let bytes = job.stored.count
        lock.withLock(when: { !($0.queuedBytes > 0 && $0.queuedBytes + bytes > capacityBytes) }) { state in
            state.queue.append(job)
            state.queuedBytes += bytes
            lock.broadcast()
        }
    }

    /// Lets the workers finish the queue, then ends them and waits.
    func stop() {
        lock.withLock { state in
            state.stopping = true
            lock.broadcast()
        }
        lock.withLock(when: { $0.running == 0 }) { _ in }
    }

    /// The next job for `worker`: the oldest whose file no other worker is on, within
    /// `lookahead` of the head; else the oldest. Nil once stopping and the queue is empty.
    private func next(for worker: Int) -> Job? {
        lock.withLock(when: { $0.head < $0.queue.count || $0.stopping }) { state -> Job? in
            guard state.head < state.queue.count else { return nil }
            let head = state.head
            let pick =
                head
                + Self.pick(
                    state.queue[head...].prefix(Self.lookahead).map { $0.need.destinations.first?.path },
                    avoiding: state.inProgress.compactMap { $0 })
            if pick != head { state.queue.swapAt(head, pick) }
            let job = state.queue[head]
            state.inProgress[worker] = job.need.destinations.first?.path
            state.head += 1
            if state.head > 1024 && state.head * 2 > state.queue.count {
                state.queue.removeFirst(state.head)
                state.head = 0
            }
            return job
        }
    }

    /// Which of the next jobs (by the file each goes to, oldest first) a worker takes: the first
    /// whose file is not among `busy` (the files other workers are on), else the first.
    static func pick(_ files: [String?], avoiding busy: [String]) -> Int {
        guard !busy.isEmpty else { return 0 }
        return files.firstIndex { file in !busy.contains { $0 == file } } ?? 0
    }

    /// `worker` is done with a job of `bytes` stored bytes: room in the queue, and its file free.
    private func dequeued(_ bytes: Int, by worker: Int) {
        lock.withLock { state in
            state.queuedBytes -= bytes
            state.inProgress[worker] = nil
            lock.broadcast()
        }
    }

    private func work(_ worker: Int) {
        var inflated = UnsafeMutableRawBufferPointer.allocate(byteCount: 0, alignment: 16)
        let decompressor = Decompressor()
        while let job = next(for: worker) {
            let chunk = job.need.chunk
            if inflated.count < chunk.length {
                inflated.deallocate()
                inflated = .allocate(byteCount: chunk.length, alignment: 16)
            }
            let error = process(job, inflated: inflated, decompressor: decompressor)
            let bytes = job.stored.count
            job.stored.deallocate()
            dequeued(bytes, by: worker)
            job.results.finished(job.index, error: error)
        }
        inflated.deallocate()
        lock.withLock { state in
            state.running -= 1
            lock.broadcast()
        }
    }

    /// Inflates and checks one chunk, then writes it to every place it goes.
    private func process(_ job: Job, inflated: UnsafeMutableRawBufferPointer, decompressor: Decompressor)
        -> PatchSyncError?
    {
        let chunk = job.need.chunk
        guard
            let content = chunk.verifiedContent(
                of: UnsafeRawBufferPointer(job.stored), scratch: inflated,
                decompressor: decompressor)
        else {
            return PatchSyncError(
                .refusedData,
                "object \(job.need.object) from \(job.results.url): the chunk at object "
                    + "offset \(chunk.objectOffset) does not match its signed SHA-256 \(chunk.sha256)",
                remedy: "the mirror serves a damaged or tampered object; report it to the publisher")
        }
        do { try files.write(content, chunk: chunk.sha256, to: job.need.destinations) } catch { return error }
        return nil
    }
}
