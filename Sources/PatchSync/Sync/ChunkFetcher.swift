import Foundation
import Synchronization

/// Runs the range requests of a plan, a bounded number at once, each retried on the
/// mirrors as the origin's retry policy decides; a response that fails part-way leaves
/// the chunks it delivered and verified, and the next attempt asks for the rest.
struct ChunkFetcher: Sendable {
    let origin: Origin
    let files: StagedFiles
    let limit: Int
    let onEvent: @Sendable (SyncEvent) -> Void
    /// An unlocked preload's objects: sealed ones are opened from what was preloaded, never fetched plain.
    var sealed: SealedSource? = nil

    /// Fetches `requests` (`total` stored bytes); progress events count `before` bytes first (what
    /// this sync already fetched another way).
    func run(_ requests: [[Plan.Need]], total: Int64, before: Int64 = 0) async throws(PatchSyncError) {
        let progress = Progress(total: total, before: before, requests: requests)
        let pipeline = ChunkPipeline(files: files)
        defer { pipeline.stop() }
        try await Self.each(requests, atOnce: limit) { request in try await fetch(request, pipeline: pipeline, progress: progress) }
    }

    /// Runs `body` on each of `items`, at most `limit` at once; the first failure ends the others.
    static func each<Item: Sendable>(_ items: [Item], atOnce limit: Int,
                                     _ body: @escaping @Sendable (Item) async throws -> Void) async throws(PatchSyncError) {
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                var running = 0
                for item in items {
                    if running >= limit {
                        _ = try await group.next()
                        running -= 1
                    }
                    group.addTask { try await body(item) }
                    running += 1
                }
                for try await _ in group {}
            }
        } catch { throw PatchSyncError.wrap(error) }
    }

    /// Fetches one coalesced range; returns once all its needs are written. While the client
    /// yields to other traffic, the range goes in parts of its ``HTTPClient/requestBudget``. Each
    /// attempt asks for what is still missing: a response cut short keeps the chunks it delivered, and
    /// counts as progress for the origin's retry policy (``Origin/withRetries(_:absence:deadline:preferring:onGiveUp:_:)``).
    /// Progress is reported per attempt, for the chunks it made durable (a range of a pack may be
    /// many parts long while yielding).
    private func fetch(_ needs: [Plan.Need], pipeline: ChunkPipeline, progress: Progress) async throws(PatchSyncError) {
        if let sealed, let stored = try await sealed.stored(needs, origin: origin) {
            try await write(needs, stored, pipeline: pipeline, progress: progress)
            return
        }
        var remaining = needs
        let path = ObjectID.path(needs[0].object)
        return try await origin.withRetries("object \(needs[0].object)") {
            (mirror: Int) async throws(PatchSyncError) -> Origin.Attempt<Void> in
            let url = origin.url(path, mirror: mirror)
            let part = Self.prefix(of: remaining, budget: origin.client.requestBudget)
            let sink = ChunkSink(needs: part, pipeline: pipeline, url: url)
            var result = await origin.client.fetch(TransferRequest(url: url, range: sink.range, maxBytes: Int64.max),
                                                   into: sink)
            await sink.drained()
            let (left, refused) = sink.outcome
            remaining = left + remaining.dropFirst(part.count)
            if let refused { result = .failure(.refused(refused)) }
            try await files.durable()
            let missing = Set(left.map(\.chunk.sha256))
            progress.add(part.filter { !missing.contains($0.chunk.sha256) }, emit: onEvent)
            if remaining.isEmpty { return .done(()) }
            let progressed = left.count < part.count
            switch result {
            case .failure(let failure): return .failed(failure, progressed: progressed)
            case .success where left.isEmpty: return .more  // the next part of the range
            case .success:
                return .failed(.wrongRange("the response ended before \(left.count) of its \(part.count) chunks"),
                               progressed: progressed)
            }
        }
    }

    /// Hands chunks opened (or read) from a preload to the pipeline, which checks each against its
    /// plaintext SHA-256 before it is written.
    private func write(_ needs: [Plan.Need], _ stored: [[UInt8]], pipeline: ChunkPipeline,
                       progress: Progress) async throws(PatchSyncError) {
        for (need, bytes) in zip(needs, stored) {
            let sink = ChunkSink(needs: [need], pipeline: pipeline, url: "preloaded object \(need.object)")
            if let failure = bytes.withUnsafeBytes({ sink.receive($0) }) { throw failure }
            await sink.drained()
            if let refused = sink.outcome.failure { throw refused }
            guard sink.outcome.remaining.isEmpty else {
                if let sealed, !sealed.isSealed(need.object) {  // a preloaded plain range: the origin's copy next time
                    sealed.store.drop(object: need.object, offset: need.chunk.objectOffset)
                }
                throw PatchSyncError(.refusedData, "a preloaded chunk of object \(need.object) does not match its SHA-256",
                                     remedy: "nothing was installed and the live build is untouched; a damaged preloaded "
                                         + "range is fetched again at the next sync, else report it to the publisher")
            }
        }
        try await files.durable()
        progress.add(needs, emit: onEvent)
    }

    /// The leading needs of a range whose bytes fit `budget` (at least one); all without a budget.
    static func prefix(of needs: [Plan.Need], budget: Int?) -> [Plan.Need] {
        guard let budget, let first = needs.first else { return needs }
        var end = 1
        while end < needs.count,
              needs[end].chunk.objectOffset + Int64(needs[end].chunk.objectLength) - first.chunk.objectOffset <= budget {
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
        private let transfer: TransferProgress

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
                if let event = transfer.add(needs.reduce(Int64(0)) { $0 + Int64($1.chunk.objectLength) }, files: finished) {
                    emit(event)
                }
            }
        }
    }
}
