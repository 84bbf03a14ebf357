import Foundation
import Logging
import Synchronization

/// Players on the same network that share chunks (``ShareServer``), asked before the origin, a range
/// at a time. Every chunk a peer sends goes through the same ``ChunkPipeline`` as the origin's, checked
/// against the SHA-256 of the signed manifest before it is written. What peers may cost a sync is
/// bounded by ``PeerPolicy``: a few peers chosen by a probe, one request per peer for a range it lacks,
/// a small time for each answer and for each range, after which the rest of the range comes from the
/// origin.
struct PeerChunks: ChunkSource {
    let peers: Peers

    func deliver(
        _ needs: [Plan.Need], to pipeline: ChunkPipeline, files: StagedFiles,
        delivered: @escaping @Sendable ([Plan.Need]) -> Void
    ) async throws(PatchSyncError) -> [Plan.Need] {
        let (got, left) = await peers.fetch(needs, pipeline: pipeline)
        if !got.isEmpty {
            try await files.durable()
            delivered(got)
        }
        return left
    }

    /// Delta packs come from the origin: a share serves chunks only.
    func whole(
        _ object: SHA256Digest, length: Int64, to local: String,
        progress: @escaping @Sendable (Int64) -> Void
    ) async throws(PatchSyncError) -> Int64? { nil }
}

/// The peers of one sync, their standing and what they delivered.
///
/// Their requests go through the sync's own client, as the origin's do: one bandwidth cap for both
/// (`--max-rate`, a background sync's rate, yielding to other traffic), and every byte heard by the
/// sync's meter, so a sync whose peers deliver is never said stalled. They never follow a redirect and
/// each has its own short timeout (``PeerPolicy``), its body waited for at the share of the cap one
/// connection has when that is below ``PeerPolicy/floorBytesPerSecond``.
///
/// Thread-safety: a `Mutex` holds the ``PeerPolicy`` (each peer's standing and record), another the
/// probe's task; ranges are fetched concurrently.
public final class Peers: Sendable {
    /// What became of one peer, for the sync's report.
    public struct Standing: Codable, Sendable, Equatable {
        public var url: String
        public var chunks = 0
        /// Content bytes of the chunks it delivered.
        public var bytes: Int64 = 0
        /// Chunks it did not have (404) or would not give now (503).
        public var misses = 0
        /// Why it was dropped for the rest of the sync (nil: it was not).
        public var dropped: String?
    }

    static let logger = Logger(label: "patchsync.peers")

    private let policy: Mutex<PeerPolicy>
    /// The probe that chooses the peers in use: started by the first range, awaited by every range.
    private let probing = Mutex<Task<Void, Never>?>(nil)
    private let client: HTTPClient
    /// The base URLs of the peers, by index in the policy's records.
    private let urls: [String]
    let repository: String

    /// `urls`: the peers' base URLs (`http://192.168.1.20:27472`), named ones first; only the first
    /// ``PeerPolicy/maxProbed`` distinct ones are kept. `client`: the sync's, the origin's too.
    init(urls: [String], repository: String, client: HTTPClient) {
        let policy = PeerPolicy(urls: urls)
        self.client = client
        self.urls = policy.records.map(\.standing.url)
        self.policy = Mutex(policy)
        self.repository = repository
    }

    /// What each peer did so far.
    public var standings: [Standing] { policy.withLock { $0.records.map(\.standing) } }
    /// Content bytes peers delivered so far.
    public var bytes: Int64 { policy.withLock { $0.records.reduce(0) { $0 + $1.standing.bytes } } }

    /// Asks the peers in use for one range's chunks (`needs`, in object order), each put through
    /// `pipeline`, as ``PeerPolicy`` allows: returns the chunks delivered, and those left for the
    /// origin (the rest of `needs`, in order).
    func fetch(_ needs: [Plan.Need], pipeline: ChunkPipeline) async -> (got: [Plan.Need], left: [Plan.Need]) {
        guard let first = needs.first else { return ([], []) }
        await chooseOnce(by: first)
        let bytes = needs.reduce(Int64(0)) { $0 + Int64($1.chunk.length) }
        let floor = self.floor
        var turn = policy.withLock {
            $0.begin(chunks: needs.count, bytes: bytes, at: ContinuousClock.now, floor: floor)
        }
        var got: [Plan.Need] = []
        var left = needs[...]
        while let need = left.first {
            var step = policy.withLock { $0.next(&turn, length: need.chunk.length, at: ContinuousClock.now) }
            while case .wait(let until) = step, !Task.isCancelled {
                try? await Task.sleep(until: until, clock: .continuous)
                step = policy.withLock { $0.next(&turn, length: need.chunk.length, at: ContinuousClock.now) }
            }
            // No asking (the range is done, its time is up, no peer is left), or writing failed here.
            guard case .ask(let index, let timeout) = step else { break }
            guard let asked = await ask(index, for: need, within: timeout, pipeline: pipeline) else {
                policy.withLock { $0.abandoned(turn) }
                break
            }
            let dropped = policy.withLock {
                $0.answered(
                    asked.answer, elapsed: asked.elapsed, length: need.chunk.length, turn: &turn,
                    at: ContinuousClock.now)
            }
            if let dropped { Self.logger.notice("peer \(urls[index]) dropped for this sync: \(dropped)") }
            if case .chunk = asked.answer {
                got.append(left.removeFirst())
            } else {
                Self.logger.debug(
                    "peer \(urls[index]) answered \(asked.answer) after \(PeerPolicy.text(asked.elapsed))")
            }
        }
        if !left.isEmpty {
            Self.logger.debug(
                "\(left.count) of \(needs.count) chunks (\(left.reduce(Int64(0)) { $0 + Int64($1.chunk.length) }) B) of object \(first.object) left to the origin"
            )
        }
        return (got, Array(left))
    }

    /// Asks peer `index` for `need`'s chunk within `timeout` and puts it through `pipeline`: its answer
    /// and the time the request took. nil when writing the chunk failed here: a full disk is not the
    /// peer's fault, and the origin's copy meets it again.
    private func ask(_ index: Int, for need: Plan.Need, within timeout: Duration, pipeline: ChunkPipeline) async
        -> (answer: PeerPolicy.Answer, elapsed: Duration)?
    {
        let body = DataSink()
        let began = ContinuousClock.now
        let answer = await get(need, from: index, within: timeout, into: body)
        let elapsed = ContinuousClock.now - began
        guard case .chunk = answer else { return (answer, elapsed) }
        // As the chunk itself, raw: the pipeline checks its hash before writing it.
        var raw = need
        raw.chunk.codec = .raw
        raw.chunk.objectOffset = 0
        raw.chunk.objectLength = need.chunk.length
        let sink = ChunkSink(needs: [raw], pipeline: pipeline, url: urls[index])
        let refused = body.data.withUnsafeBytes { sink.receive($0) }
        await sink.drained()
        let outcome = sink.outcome
        guard refused == nil, outcome.failure == nil, outcome.remaining.isEmpty else {
            // Bytes that fail their hash are the peer's doing; any other failure is local.
            let failure = refused ?? outcome.failure
            guard failure == nil || failure?.code == .refusedData else { return nil }
            return (PeerPolicy.Answer.damaged(Self.mismatch(need)), elapsed)
        }
        return (answer, elapsed)
    }

    /// GETs `need`'s chunk from peer `index` into `body` within `timeout`: `.chunk` when the body has
    /// the chunk's length (its hash is checked by the caller).
    private func get(_ need: Plan.Need, from index: Int, within timeout: Duration, into body: DataSink) async
        -> PeerPolicy.Answer
    {
        let address = urls[index] + ShareRequest.path(repository: repository, chunk: need.chunk.sha256)
        var request = TransferRequest(url: address, maxBytes: Int64(need.chunk.length))
        request.timeout = timeout.inSeconds
        request.followRedirects = false  // a peer never sends the player's requests elsewhere
        request.fromOrigin = false
        switch await client.fetch(request, into: body) {
        case .failure(.notFound): return .lacks
        case .failure(.httpStatus(503, let retryAfter?)) where retryAfter < PeerPolicy.pause: return .later(retryAfter)
        case .failure(.httpStatus(503, _)): return .busy
        case .failure(let failure): return .failed("\(failure)")
        case .success:
            let count = body.data.count
            guard count == need.chunk.length else {
                return .failed("sent \(count) bytes for a chunk of \(need.chunk.length)")
            }
            // as installed, like the origin's count
            return .chunk(installed: Int64(count) * Int64(need.destinations.count))
        }
    }

    /// Chooses the peers in use once, by a probe for `need`'s chunk; every range waits for it.
    private func chooseOnce(by need: Plan.Need) async {
        let task = probing.withLock { running -> Task<Void, Never> in
            if let started = running { return started }
            let started = Task { await self.probe(need) }
            running = started
            return started
        }
        await task.value
    }

    /// Asks every peer for `need`'s chunk, within ``PeerPolicy/probeBudget``, and lets the policy choose
    /// the few to use. As many at once as the client has connections: a probe queued behind another
    /// would be timed from before it was sent.
    private func probe(_ need: Plan.Need) async {
        let floor = self.floor
        let timeout = PeerPolicy.allowance(PeerPolicy.probeBudget, bytes: need.chunk.length, floor: floor)
        let probes = await withTaskGroup(of: (Int, PeerPolicy.Answer, Duration).self) {
            group -> [(answer: PeerPolicy.Answer, elapsed: Duration)] in
            var probes = urls.map { _ in (answer: PeerPolicy.Answer.failed("not probed"), elapsed: Duration.zero) }
            for index in urls.indices {
                if index >= client.maxConnections, let (done, answer, elapsed) = await group.next() {
                    probes[done] = (answer, elapsed)
                }
                group.addTask {
                    let body = DataSink()
                    let began = ContinuousClock.now
                    var answer = await self.get(need, from: index, within: timeout, into: body)
                    if case .chunk = answer, SHA256Digest.of(body.data) != need.chunk.sha256 {
                        answer = .damaged(Peers.mismatch(need))
                    }
                    return (index, answer, ContinuousClock.now - began)
                }
            }
            for await (index, answer, elapsed) in group { probes[index] = (answer, elapsed) }
            return probes
        }
        let standings = policy.withLock { policy in
            policy.choose(probes, length: need.chunk.length, floor: floor)
            return policy.records.map(\.standing)
        }
        for standing in standings {
            if let why = standing.dropped { Self.logger.notice("peer \(standing.url) not used for this sync: \(why)") }
        }
    }

    /// The slowest body a peer is waited for now, per request: one connection's share of
    /// ``PeerPolicy/floorBytesPerSecond``, or of the sync's cap when that is less (a peer is not blamed
    /// for the time the sync's own budget holds its bytes back). The sync has up to
    /// ``HTTPClient/maxConnections`` ranges in flight, each a request to the same peer at once.
    private var floor: Int {
        let total = min(PeerPolicy.floorBytesPerSecond, client.rate.map { Int($0) } ?? Int.max)
        return max(1024, total / max(1, client.maxConnections))
    }

    static func mismatch(_ need: Plan.Need) -> String {
        "it sent a chunk that does not match its signed SHA-256 (\(need.chunk.sha256))"
    }
}
