import Foundation
import Synchronization

/// Receives one range of an object and cuts it into its chunks; each complete chunk goes to the
/// ``ChunkPipeline``, which inflates it, checks its SHA-256 and only then writes it to its places
/// in the staged build.
///
/// Thread-safety: not Sendable, as one thread at a time uses it: the client hands it to the transfer
/// thread (through its ``TransferBox``), where `receive` alone touches the chunk being assembled, and
/// the requester uses it again only once the fetch has returned. What the pipeline's workers report
/// from their threads goes to its ``Results`` (Sendable, a `Mutex`). The assembly needs no lock, and
/// could not be in a `Mutex` anyway: the chunk being assembled is a raw buffer, and a `Mutex`'s state
/// may not take bytes from the caller's buffer (region isolation).
final class ChunkSink: ResponseSink {
    private let needs: [Plan.Need]
    private let pipeline: ChunkPipeline
    private let results: Results
    private var position: Int64
    private var index = 0
    /// The stored bytes of the chunk being assembled, handed to the pipeline when complete.
    private var current: UnsafeMutableRawBufferPointer?
    private var filled = 0

    /// Where the file asked for starts in the object's offsets (a segment's start, ``ObjectNaming``).
    private let base: Int64

    /// The range to ask for: from the first chunk's start to the last chunk's end, in the file asked for.
    var range: ClosedRange<Int64> {
        let last = needs[needs.count - 1].chunk
        return (needs[0].chunk.objectOffset - base)...(last.objectOffset + Int64(last.objectLength) - 1 - base)
    }

    init(needs: [Plan.Need], pipeline: ChunkPipeline, url: String, base: Int64 = 0) {
        self.needs = needs
        self.base = base
        self.pipeline = pipeline
        self.position = needs[0].chunk.objectOffset
        results = Results(count: needs.count, url: url)
    }

    deinit { current?.deallocate() }

    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError? {
        if let failure = results.failure { return failure }  // a chunk failed: stop early
        var rest = bytes[...]
        while !rest.isEmpty {
            guard index < needs.count else {
                return PatchSyncError(.refusedData, "\(results.url) sent more bytes than the range asked")
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
            results.submitted()
            pipeline.submit(.init(need: needs[index], stored: stored, results: results, index: index))
            index += 1
        }
        return nil
    }

    /// Waits until every chunk handed to the pipeline has been written or refused.
    func drained() async {
        await results.drained()
    }

    /// The needs not yet written and verified, in object order; and the first refusal, if any.
    var outcome: (remaining: [Plan.Need], failure: PatchSyncError?) {
        let (done, failure) = results.verdicts
        return (needs.indices.filter { !done[$0] }.map { needs[$0] }, failure)
    }
}

extension ChunkSink {
    /// What the pipeline's workers report about one range's chunks (written, or the first refusal),
    /// and the requester waiting for the last of them.
    ///
    /// Thread-safety: a `Mutex` holds the reports and the waiting requester; workers report from
    /// their threads.
    final class Results: Sendable {
        private struct State {
            var done: [Bool]
            var failure: PatchSyncError?
            var outstanding = 0
            var waiter: CheckedContinuation<Void, Never>?
        }

        /// Where the range comes from, for messages.
        let url: String
        private let state: Mutex<State>

        init(count: Int, url: String) {
            self.url = url
            state = Mutex(State(done: Array(repeating: false, count: count)))
        }

        /// The first refusal, once a chunk was refused.
        var failure: PatchSyncError? { state.withLock { $0.failure } }

        /// Which chunks are written, and the first refusal, if any.
        var verdicts: (done: [Bool], failure: PatchSyncError?) { state.withLock { ($0.done, $0.failure) } }

        /// Counts a chunk handed to the pipeline.
        func submitted() {
            state.withLock { $0.outstanding += 1 }
        }

        /// Called by a pipeline worker when chunk `index` is written (nil) or refused.
        func finished(_ index: Int, error: PatchSyncError?) {
            let resume = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if let error { state.failure = state.failure ?? error } else { state.done[index] = true }
                state.outstanding -= 1
                guard state.outstanding == 0, let waiter = state.waiter else { return nil }
                state.waiter = nil
                return waiter
            }
            resume?.resume()
        }

        /// Waits until every chunk handed to the pipeline has been written or refused.
        func drained() async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now: Bool = state.withLock { state in
                    if state.outstanding == 0 { return true }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        }
    }
}
