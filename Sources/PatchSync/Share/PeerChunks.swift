import Foundation
import Logging
import Synchronization

/// Players on the same network that share chunks (``ShareServer``), asked before the origin, chunk by
/// chunk. Every chunk a peer sends goes through the same ``ChunkPipeline`` as the origin's, checked
/// against the SHA-256 of the signed manifest before it is written; a chunk a peer lacks (404), will
/// not give now (503: its game runs) or fails to send in time comes from the next peer or the origin.
/// A peer that sends one chunk that fails its hash is dropped for the rest of the sync, and so is one
/// that fails ``Peers/strikes`` requests in a row (gone, or too slow).
struct PeerChunks: ChunkSource {
    let peers: Peers

    func deliver(
        _ needs: [Plan.Need], to pipeline: ChunkPipeline, files: StagedFiles,
        delivered: @escaping @Sendable ([Plan.Need]) -> Void
    ) async throws(PatchSyncError) -> [Plan.Need] {
        var left: [Plan.Need] = [], got: [Plan.Need] = []
        for need in needs {
            if await peers.fetch(need, pipeline: pipeline) { got.append(need) } else { left.append(need) }
        }
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
/// Thread-safety: a `Mutex` holds each peer's standing and the counters; requests run concurrently.
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

    /// Failed requests in a row after which a peer is dropped.
    static let strikes = 3

    private struct Peer {
        var standing: Standing
        var failuresInARow = 0
        /// Answered 503 (its game runs): not asked until then.
        var pausedUntil: ContinuousClock.Instant?
    }

    private let state: Mutex<[Peer]>
    private let client: HTTPClient
    let repository: String

    /// `urls`: the peers' base URLs (`http://192.168.1.20:27472`), asked in this order.
    init(urls: [String], repository: String) throws(PatchSyncError) {
        var settings = HTTPClient.Settings()
        settings.maxConnections = max(4, urls.count * 4)
        settings.maxConnectionsPerHost = 4
        settings.connectTimeoutSeconds = 2
        // A peer on the same network sends a chunk in well under a second; one slower than this is
        // dropped and the origin takes over.
        settings.lowSpeedBytes = 64 << 10
        settings.lowSpeedSeconds = 2
        settings.requestTimeoutSeconds = 10
        settings.followRedirects = false  // a peer never sends the player's requests elsewhere
        client = try HTTPClient(settings: settings)
        self.repository = repository
        var seen = Set<String>()
        state = Mutex(
            urls.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }.filter { seen.insert($0).inserted }
                .map { Peer(standing: Standing(url: $0)) })
    }

    /// What each peer did so far.
    public var standings: [Standing] { state.withLock { $0.map(\.standing) } }
    /// Content bytes peers delivered so far.
    public var bytes: Int64 { state.withLock { $0.reduce(0) { $0 + $1.standing.bytes } } }

    /// The peers to ask now, in order.
    private func usable() -> [Int] {
        let now = ContinuousClock.now
        return state.withLock { peers in
            peers.indices.filter { peers[$0].standing.dropped == nil && (peers[$0].pausedUntil.map { now >= $0 } ?? true) }
        }
    }

    /// Asks the peers in turn for `need`'s chunk and puts it through `pipeline`; true once it is written.
    func fetch(_ need: Plan.Need, pipeline: ChunkPipeline) async -> Bool {
        for index in usable() {
            guard let url = state.withLock({ $0[index].standing.dropped == nil ? $0[index].standing.url : nil }) else { continue }
            let address = url + ShareRequest.path(repository: repository, chunk: need.chunk.sha256)
            let body = DataSink()
            let length = Int64(need.chunk.length)
            let result = await client.fetch(TransferRequest(url: address, maxBytes: length), into: body)
            switch result {
            case .failure(.notFound):  // a lack, not a failure: it neither strikes nor clears strikes
                update(index) { $0.standing.misses += 1 }
                continue
            case .failure(.httpStatus(503, _)):
                update(index) {
                    $0.standing.misses += 1
                    $0.pausedUntil = ContinuousClock.now + .seconds(30)
                }
                continue
            case .failure(let failure):
                strike(index, "\(failure)")
                continue
            case .success:
                let data = body.data
                guard data.count == need.chunk.length else {
                    strike(index, "sent \(data.count) bytes for a chunk of \(need.chunk.length)")
                    continue
                }
                // As the chunk itself, raw: the pipeline checks its hash before writing it.
                var raw = need
                raw.chunk.codec = .raw
                raw.chunk.objectOffset = 0
                raw.chunk.objectLength = need.chunk.length
                let sink = ChunkSink(needs: [raw], pipeline: pipeline, url: address)
                let refused = data.withUnsafeBytes { sink.receive($0) }
                await sink.drained()
                let outcome = sink.outcome
                guard refused == nil, outcome.failure == nil, outcome.remaining.isEmpty else {
                    // Bytes that fail their hash drop the peer; a local failure (a full disk) is not its fault,
                    // and the origin's copy meets it again.
                    let failure = refused ?? outcome.failure
                    if failure == nil || failure?.code == .refusedData {
                        drop(index, "it sent a chunk that does not match its signed SHA-256 (\(need.chunk.sha256))")
                        continue
                    }
                    return false
                }
                update(index) {
                    $0.standing.chunks += 1
                    $0.standing.bytes += length * Int64(need.destinations.count)  // as installed, like the origin's count
                    $0.failuresInARow = 0
                }
                return true
            }
        }
        return false
    }

    private func update(_ index: Int, _ change: (inout Peer) -> Void) {
        state.withLock { change(&$0[index]) }
    }

    private func strike(_ index: Int, _ why: String) {
        let dropped = state.withLock { peers -> Bool in
            peers[index].failuresInARow += 1
            guard peers[index].failuresInARow >= Self.strikes, peers[index].standing.dropped == nil else { return false }
            peers[index].standing.dropped = "\(Self.strikes) requests in a row failed (last: \(why))"
            return true
        }
        if dropped { Self.logger.notice("peer dropped for this sync: \(why)") }
    }

    private func drop(_ index: Int, _ why: String) {
        state.withLock { peers in if peers[index].standing.dropped == nil { peers[index].standing.dropped = why } }
        Self.logger.notice("peer dropped for this sync: \(why)")
    }
}
