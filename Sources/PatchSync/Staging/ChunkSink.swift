import Foundation

/// Receives one range of an object and cuts it into its chunks; each complete chunk goes to the
/// ``ChunkPipeline``, which inflates it, checks its SHA-256 and only then writes it to its places
/// in the staged build.
///
/// Thread-safety: `receive` runs on the transfer thread only; `lock` guards what the pipeline's
/// workers report (`done`, `failure`, `outstanding`) and the waiting requester.
final class ChunkSink: ResponseSink, @unchecked Sendable {
    private let needs: [Plan.Need]
    private let pipeline: ChunkPipeline
    let url: String
    private var position: Int64
    private var index = 0
    /// The stored bytes of the chunk being assembled, handed to the pipeline when complete.
    private var current: UnsafeMutableRawBufferPointer?
    private var filled = 0

    private let lock = NSLock()
    private var done: [Bool]
    private var failure: PatchSyncError?
    private var outstanding = 0
    private var waiter: CheckedContinuation<Void, Never>?

    /// The range to ask for: from the first chunk's start to the last chunk's end.
    var range: ClosedRange<Int64> {
        let last = needs[needs.count - 1].chunk
        return needs[0].chunk.objectOffset...(last.objectOffset + Int64(last.objectLength) - 1)
    }

    init(needs: [Plan.Need], pipeline: ChunkPipeline, url: String) {
        self.needs = needs
        self.pipeline = pipeline
        self.url = url
        self.position = needs[0].chunk.objectOffset
        done = Array(repeating: false, count: needs.count)
    }

    deinit { current?.deallocate() }

    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError? {
        if let failure = lock.withLock({ failure }) { return failure }  // a chunk failed: stop early
        var rest = bytes[...]
        while !rest.isEmpty {
            guard index < needs.count else {
                return PatchSyncError(.refusedData, "\(url) sent more bytes than the range asked")
            }
            let chunk = needs[index].chunk
            if position < chunk.objectOffset {  // a coalesced gap: skip it
                let skip = Int(min(Int64(rest.count), chunk.objectOffset - position))
                rest = rest.dropFirst(skip)
                position += Int64(skip)
                continue
            }
            let stored = current ?? .allocate(byteCount: chunk.objectLength, alignment: 16)
            current = stored
            let take = min(rest.count, chunk.objectLength - filled)
            UnsafeMutableRawBufferPointer(rebasing: stored[filled..<(filled + take)])
                .copyMemory(from: UnsafeRawBufferPointer(rebasing: rest.prefix(take)))
            rest = rest.dropFirst(take)
            position += Int64(take)
            filled += take
            guard filled == chunk.objectLength else { continue }
            (current, filled) = (nil, 0)
            lock.withLock { outstanding += 1 }
            pipeline.submit(.init(need: needs[index], stored: stored, sink: self, index: index))
            index += 1
        }
        return nil
    }

    /// Called by a pipeline worker when chunk `index` is written (nil) or refused.
    func finished(_ index: Int, error: PatchSyncError?) {
        let resume: CheckedContinuation<Void, Never>? = lock.withLock {
            if let error { failure = failure ?? error } else { done[index] = true }
            outstanding -= 1
            guard outstanding == 0, let waiter else { return nil }
            self.waiter = nil
            return waiter
        }
        resume?.resume()
    }

    /// Waits until every chunk handed to the pipeline has been written or refused.
    func drained() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now: Bool = lock.withLock {
                if outstanding == 0 { return true }
                waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// The needs not yet written and verified, in object order; and the first refusal, if any.
    var outcome: (remaining: [Plan.Need], failure: PatchSyncError?) {
        lock.withLock { (needs.indices.filter { !done[$0] }.map { needs[$0] }, failure) }
    }
}
