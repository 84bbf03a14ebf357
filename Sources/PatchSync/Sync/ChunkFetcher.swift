import Foundation
import Synchronization

/// Runs the range requests of a plan, a bounded number at once: each range is asked of the sources in
/// turn (an unlocked preload's store first, the origin last), each source delivering what it holds and
/// the next asked for the rest; every chunk is checked against its SHA-256 before it is written.
struct ChunkFetcher: Sendable {
    let sources: [any ChunkSource]
    let files: StagedFiles
    let limit: Int
    let onEvent: @Sendable (SyncEvent) -> Void
    /// The sync's meter: the bytes of responses count toward this step's progress as they arrive.
    var meter: SyncMeter? = nil

    /// Fetches `requests` (`total` stored bytes); progress events count `before` bytes first (what
    /// this sync already fetched another way).
    func run(_ requests: [[Plan.Need]], total: Int64, before: Int64 = 0) async throws(PatchSyncError) {
        let progress = Progress(total: total, before: before, requests: requests)
        meter?.follow(progress.transfer)
        defer { meter?.follow(nil) }
        let pipeline = ChunkPipeline(files: files)
        defer { pipeline.stop() }
        try await Concurrently.each(requests, atOnce: limit) { request in
            try await fetch(request, pipeline: pipeline, progress: progress)
        }
    }

    /// One coalesced range, from the sources in turn; progress is reported as each source makes chunks
    /// durable (a range of a pack may be many parts long while yielding).
    private func fetch(_ needs: [Plan.Need], pipeline: ChunkPipeline, progress: Progress) async throws(PatchSyncError) {
        var remaining = needs
        for source in sources where !remaining.isEmpty {
            remaining = try await source.deliver(remaining, to: pipeline, files: files) {
                progress.add($0, emit: onEvent)
            }
        }
        guard remaining.isEmpty else {
            throw PatchSyncError(
                .internal, "no source delivered \(remaining.count) chunks of object \(needs[0].object)")
        }
    }

    /// The leading needs of a range whose bytes fit `budget` (at least one); all without a budget.
    static func prefix(of needs: [Plan.Need], budget: Int?) -> [Plan.Need] {
        guard let budget, let first = needs.first else { return needs }
        var end = 1
        while end < needs.count,
            needs[end].chunk.objectOffset + Int64(needs[end].chunk.objectLength) - first.chunk.objectOffset <= budget
        {
            end += 1
        }
        return Array(needs[..<end])
    }

    /// The chunks' part of the transfer's progress, shared by the concurrent requests: counts the
    /// files whose last chunk arrived.
    ///
    /// Thread-safety: a `Mutex` holds `pending`; the requests report from any thread.
    private final class Progress: Sendable {
        /// Chunks still to come per file being fetched; a file is done when its count reaches zero.
        private let pending: Mutex<[String: Int]>
        let transfer: TransferProgress

        /// `before`: bytes this sync already fetched another way (the delta pack), counted first.
        init(total: Int64, before: Int64, requests: [[Plan.Need]]) {
            var pending: [String: Int] = [:]
            for need in requests.joined() { for d in need.destinations { pending[d.path, default: 0] += 1 } }
            transfer = TransferProgress(done: before, total: before + total, filesTotal: pending.count)
            self.pending = Mutex(pending)
        }

        /// Counts `needs` as done and sends the event that is due, if any. Under the lock, so that the
        /// concurrent requests' events go out in order (`done` never goes back).
        func add(_ needs: [Plan.Need], emit: @Sendable (SyncEvent) -> Void) {
            pending.withLock { pending in
                var finished = 0
                for need in needs {
                    for d in need.destinations {
                        pending[d.path, default: 1] -= 1
                        if pending[d.path] == 0 { finished += 1 }
                    }
                }
                if let event = transfer.add(
                    needs.reduce(Int64(0)) { $0 + Int64($1.chunk.objectLength) }, files: finished)
                {
                    emit(event)
                }
            }
        }
    }
}
