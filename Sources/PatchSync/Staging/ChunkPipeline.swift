import Foundation

/// Inflates, hashes and writes fetched chunks on worker threads, so the transfer thread only
/// copies bytes and the network never waits for the CPU while a core is free.
///
/// The queue is bounded in bytes: when the workers fall behind, `submit` blocks the transfer
/// thread (which stops reading sockets, and TCP slows the senders), so memory stays bounded
/// whatever the build size.
///
/// Thread-safety: `condition` guards the queue and the counters; each worker owns its buffer.
final class ChunkPipeline: @unchecked Sendable {
    /// One chunk's stored bytes, owned by the job until a worker has finished with it.
    struct Job {
        var need: Plan.Need
        var stored: UnsafeMutableRawBufferPointer
        var sink: ChunkSink
        var index: Int
    }

    private let files: StagedFiles
    private let capacityBytes: Int
    private let condition = NSCondition()
    private var queue: [Job] = []
    private var head = 0
    private var queuedBytes = 0
    private var stopping = false
    private let workerCount: Int
    private let stopped = DispatchSemaphore(value: 0)
    /// The file each worker's current chunk goes to (first destination), so that another worker
    /// picks a chunk of a different file when the queue has one: two threads writing one file
    /// contend for its inode lock, and the kernel spins the waiter on a core the other could use.
    private var inProgress: [String?]
    /// How far past the head a worker looks for a chunk of another file.
    private static let lookahead = 16

    /// Starts `workers` threads sharing a queue of at most `capacityBytes` stored bytes.
    init(files: StagedFiles, workers: Int = ProcessInfo.processInfo.activeProcessorCount,
         capacityBytes: Int = 32 << 20) {
        self.files = files
        self.capacityBytes = capacityBytes
        workerCount = max(1, min(workers, 8))
        inProgress = Array(repeating: nil, count: workerCount)
        for number in 0..<workerCount {
            let thread = Thread { [self] in work(number) }
            thread.name = "patchsync-verify-\(number)"
            thread.start()
        }
    }

    /// Queues a chunk; blocks while the queue is full (never when it is empty, so any chunk fits).
    func submit(_ job: Job) {
        condition.lock()
        while queuedBytes > 0 && queuedBytes + job.stored.count > capacityBytes { condition.wait() }
        queue.append(job)
        queuedBytes += job.stored.count
        condition.broadcast()
        condition.unlock()
    }

    /// Lets the workers finish the queue, then ends them and waits.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
        for _ in 0..<workerCount { stopped.wait() }
    }

    /// The next job for `worker`: the oldest whose file no other worker is on, within
    /// `lookahead` of the head; else the oldest.
    private func next(for worker: Int) -> Job? {
        condition.lock()
        defer { condition.unlock() }
        inProgress[worker] = nil
        while head == queue.count && !stopping { condition.wait() }
        guard head < queue.count else { return nil }
        let pick = head + Self.pick(queue[head...].prefix(Self.lookahead).map { $0.need.destinations.first?.path },
                                    avoiding: inProgress.compactMap { $0 })
        if pick != head { queue.swapAt(head, pick) }
        let job = queue[head]
        inProgress[worker] = job.need.destinations.first?.path
        head += 1
        if head > 1024 && head * 2 > queue.count {
            queue.removeFirst(head)
            head = 0
        }
        return job
    }

    /// Which of the next jobs (by the file each goes to, oldest first) a worker takes: the first
    /// whose file is not among `busy` (the files other workers are on), else the first.
    static func pick(_ files: [String?], avoiding busy: [String]) -> Int {
        guard !busy.isEmpty else { return 0 }
        return files.firstIndex { file in !busy.contains { $0 == file } } ?? 0
    }

    private func dequeued(_ bytes: Int) {
        condition.lock()
        queuedBytes -= bytes
        condition.broadcast()
        condition.unlock()
    }

    private func work(_ worker: Int) {
        var inflated = UnsafeMutableRawBufferPointer.allocate(byteCount: 0, alignment: 16)
        let inflater = Zlib.Inflater()
        while let job = next(for: worker) {
            let chunk = job.need.chunk
            if inflated.count < chunk.length {
                inflated.deallocate()
                inflated = .allocate(byteCount: chunk.length, alignment: 16)
            }
            let error = process(job, inflated: inflated, inflater: inflater)
            let bytes = job.stored.count
            job.stored.deallocate()
            dequeued(bytes)
            job.sink.finished(job.index, error: error)
        }
        inflated.deallocate()
        stopped.signal()
    }

    /// Inflates and checks one chunk, then writes it to every place it goes.
    private func process(_ job: Job, inflated: UnsafeMutableRawBufferPointer, inflater: Zlib.Inflater) -> PatchSyncError? {
        let chunk = job.need.chunk
        guard let content = chunk.verifiedContent(of: UnsafeRawBufferPointer(job.stored), scratch: inflated,
                                                           inflater: inflater) else {
            return PatchSyncError(.refusedData, "object \(job.need.object) from \(job.sink.url): the chunk at object "
                                  + "offset \(chunk.objectOffset) does not match its signed SHA-256 \(chunk.sha256)",
                                  remedy: "the mirror serves a damaged or tampered object; report it to the publisher")
        }
        do { try files.write(content, chunk: chunk.sha256, to: job.need.destinations) } catch { return error }
        return nil
    }
}
