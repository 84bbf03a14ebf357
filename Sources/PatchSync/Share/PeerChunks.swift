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
    /// ``PeerPolicy/maxProbed`` distinct ones are kept.
    init(urls: [String], repository: String) throws(PatchSyncError) {
        let policy = PeerPolicy(urls: urls)
        var settings = HTTPClient.Settings()
        settings.maxConnections = max(4, policy.records.count * 4)
        settings.maxConnectionsPerHost = 4
        // Outer bounds: every request carries its own, much shorter, timeout (``PeerPolicy``).
        settings.connectTimeoutSeconds = 2
        settings.requestTimeoutSeconds = 10
        settings.followRedirects = false  // a peer never sends the player's requests elsewhere
        client = try HTTPClient(settings: settings)
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
        var turn = policy.withLock { $0.begin(chunks: needs.count, bytes: bytes, at: ContinuousClock.now) }
        var got: [Plan.Need] = []
        var left = needs[...]
        while let need = left.first {
            let step = policy.withLock { $0.next(&turn, length: need.chunk.length, at: ContinuousClock.now) }
            // No asking (the range is done, its time is up, no peer is left), or writing failed here.
            guard case .ask(let index, let timeout) = step,
                let asked = await ask(index, for: need, within: timeout, pipeline: pipeline)
            else { break }
            let dropped = policy.withLock {
                $0.answered(asked.answer, elapsed: asked.elapsed, length: need.chunk.length, turn: &turn, at: ContinuousClock.now)
            }
            if let dropped { Self.logger.notice("peer \(urls[index]) dropped for this sync: \(dropped)") }
            if case .chunk = asked.answer { got.append(left.removeFirst()) }
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
    private func get(_ need: Plan.Need, from index: Int, within timeout: Duration, into body: DataSink) async -> PeerPolicy.Answer {
        let address = urls[index] + ShareRequest.path(repository: repository, chunk: need.chunk.sha256)
        var request = TransferRequest(url: address, maxBytes: Int64(need.chunk.length))
        request.timeout = PeerPolicy.seconds(timeout)
        switch await client.fetch(request, into: body) {
        case .failure(.notFound): return .lacks
        case .failure(.httpStatus(503, _)): return .busy
        case .failure(let failure): return .failed("\(failure)")
        case .success:
            let count = body.data.count
            guard count == need.chunk.length else { return .failed("sent \(count) bytes for a chunk of \(need.chunk.length)") }
            return .chunk(installed: Int64(count) * Int64(need.destinations.count))  // as installed, like the origin's count
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

    /// Asks every peer at once for `need`'s chunk, within ``PeerPolicy/probeBudget``, and lets the
    /// policy choose the few to use.
    private func probe(_ need: Plan.Need) async {
        let timeout = PeerPolicy.allowance(PeerPolicy.probeBudget, bytes: need.chunk.length)
        let probes = await withTaskGroup(of: (Int, PeerPolicy.Answer, Duration).self) {
            group -> [(answer: PeerPolicy.Answer, elapsed: Duration)] in
            for index in urls.indices {
                group.addTask {
                    let body = DataSink()
                    let began = ContinuousClock.now
                    var answer = await self.get(need, from: index, within: timeout, into: body)
                    if case .chunk = answer, SHA256Digest.of(body.data) != need.chunk.sha256 { answer = .damaged(Peers.mismatch(need)) }
                    return (index, answer, ContinuousClock.now - began)
                }
            }
            var probes = urls.map { _ in (answer: PeerPolicy.Answer.failed("not probed"), elapsed: Duration.zero) }
            for await (index, answer, elapsed) in group { probes[index] = (answer, elapsed) }
            return probes
        }
        let standings = policy.withLock { policy in
            policy.choose(probes, length: need.chunk.length)
            return policy.records.map(\.standing)
        }
        for standing in standings {
            if let why = standing.dropped { Self.logger.notice("peer \(standing.url) not used for this sync: \(why)") }
        }
    }

    static func mismatch(_ need: Plan.Need) -> String {
        "it sent a chunk that does not match its signed SHA-256 (\(need.chunk.sha256))"
    }
}

/// What a sync may spend on its peers, decided from what each one answered and when (instants of the
/// caller's clock, so tests drive it without waiting).
///
/// At most ``maxInUse`` peers are asked, discovered ones included: those that answered a probe for one
/// chunk soonest, holders first. A range walks through them in that order: a peer that lacks a chunk
/// (404) or will not give now (503) hands the rest of the range to the next one, so a lack costs one
/// request per peer and range, however many chunks. Each answer has ``answerBudget`` plus its body at
/// ``floorBytesPerSecond``, and all peers together have ``budget(chunks:bytes:)`` per range; past it
/// the rest of the range comes from the origin. A peer is dropped for the rest of the sync when it
/// sends bytes that fail their hash, when ``strikes`` answers in a row fail or come late, when it uses
/// up the time of ``overruns`` ranges in a row, or when it lacked ``misses`` ranges or more, over half
/// of those it was asked.
struct PeerPolicy: Sendable {
    typealias Instant = ContinuousClock.Instant

    /// Peers asked at most in one sync, discovered ones included.
    static let maxInUse = 3
    /// Peers probed at most: the first given (`--peer`, the configuration's, then discovered ones).
    static let maxProbed = 8
    /// The time a peer's answer may take, besides its body: a LAN answers in milliseconds.
    static let answerBudget = Duration.milliseconds(500)
    /// The time the probe's answer may take, besides its body.
    static let probeBudget = Duration.seconds(1)
    /// The slowest body a peer is waited for, per request: a sync asks a peer for a few ranges at
    /// once (6 by default), which a 100 Mbit/s link serves at about this.
    static let floorBytesPerSecond = 2 << 20
    /// A range's time for each of its chunks, besides their bytes: a request and the share's read.
    static let perChunk = Duration.milliseconds(25)
    /// Failed or late answers in a row after which a peer is dropped (a prompt chunk clears them).
    static let strikes = 3
    /// Ranges in a row whose time ran out while a peer was asked, after which it is dropped.
    static let overruns = 3
    /// Ranges lacked after which a peer is dropped, when they are over half of those it was asked.
    static let misses = 3
    /// How long a peer that answered 503 (its game runs) is left alone.
    static let pause = Duration.seconds(30)

    /// What a peer answered one request with.
    enum Answer: Sendable, Equatable {
        /// The chunk, whole (and, for a fetch, matching its SHA-256 and written): `installed` content
        /// bytes, once per place the chunk goes.
        case chunk(installed: Int64)
        /// 404: it does not hold the chunk.
        case lacks
        /// 503: it will not give now (its game runs).
        case busy
        /// No answer in time, a network error, another status (a redirect too), the wrong length.
        case failed(String)
        /// Bytes that do not match the chunk's signed SHA-256.
        case damaged(String)
    }

    /// What to do next for a range.
    enum Step: Sendable, Equatable {
        /// Ask `peer` for the first chunk left, with this request timeout.
        case ask(peer: Int, timeout: Duration)
        /// Every chunk of the range came from peers.
        case done
        /// The rest of the range comes from the origin: its time is up, or no peer is left to ask.
        case origin
    }

    /// What the policy knows of one peer.
    struct Record: Sendable {
        var standing: Peers.Standing
        var strikes = 0
        var overruns = 0
        /// Ranges it answered for, and those it lacked from the first chunk asked.
        var rangesAsked = 0
        var rangesMissed = 0
        var pausedUntil: Instant?
    }

    /// One range's walk through the peers in use.
    struct Turn: Sendable {
        /// The rest of the range comes from the origin from then on.
        let deadline: Instant
        /// The peers to ask, in order, and the position of the one asked now.
        let order: [Int]
        var position = 0
        /// Chunks of the range not delivered yet.
        var left: Int
        /// Answers of the peer asked now, in this range, and the chunks among them.
        var answers = 0
        var delivered = 0

        /// The next peer's turn.
        mutating func pass() {
            position += 1
            answers = 0
            delivered = 0
        }
    }

    private(set) var records: [Record]
    /// The peers in use, best first; nil until ``choose(_:length:)``.
    private(set) var inUse: [Int]?

    /// The peers of `urls` (base URLs, a trailing slash dropped), each once, the first ``maxProbed``.
    init(urls: [String]) {
        var seen = Set<String>()
        let distinct = urls.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }.filter { seen.insert($0).inserted }
        records = distinct.prefix(Self.maxProbed).map { Record(standing: Peers.Standing(url: $0)) }
    }

    /// The time an answer may take: `budget`, plus `bytes` of body at ``floorBytesPerSecond``.
    static func allowance(_ budget: Duration, bytes: Int) -> Duration {
        budget + Duration.seconds(Double(bytes) / Double(floorBytesPerSecond))
    }

    /// The time all peers together have for a range of `chunks` chunks and `bytes` content bytes: two
    /// answers' budget, ``perChunk`` for each chunk, and the bytes at ``floorBytesPerSecond``.
    static func budget(chunks: Int, bytes: Int64) -> Duration {
        answerBudget * 2 + perChunk * chunks + Duration.seconds(Double(bytes) / Double(floorBytesPerSecond))
    }

    /// Chooses the peers in use from a probe of each (`probes[i]`: peer i's answer for a chunk of
    /// `length` bytes, and the time it took): those that sent the chunk, then those that lack it, each
    /// the soonest first, at most ``maxInUse``. A peer that failed, was busy, sent damaged bytes or
    /// answered later than ``probeBudget`` allows is dropped for the sync, and so is any beyond.
    mutating func choose(_ probes: [(answer: Answer, elapsed: Duration)], length: Int) {
        let allowed = Self.allowance(Self.probeBudget, bytes: length)
        // Ranked: 0 for a peer that sent the chunk, 1 for one that lacks it; then by time, then by order.
        var candidates: [(rank: Int, elapsed: Duration, peer: Int)] = []
        for (peer, probe) in zip(records.indices, probes) {
            switch probe.answer {
            case .chunk where probe.elapsed <= allowed: candidates.append((0, probe.elapsed, peer))
            case .lacks where probe.elapsed <= allowed: candidates.append((1, probe.elapsed, peer))
            case .chunk, .lacks: drop(peer, "it answered the probe after \(Self.text(probe.elapsed)) (\(Self.text(allowed)) allowed)")
            case .busy: drop(peer, "it was busy (503) when probed")
            case .failed(let why): drop(peer, "it failed the probe: \(why)")
            case .damaged(let why): drop(peer, why)
            }
        }
        candidates.sort { ($0.rank, $0.elapsed, $0.peer) < ($1.rank, $1.elapsed, $1.peer) }
        inUse = candidates.prefix(Self.maxInUse).map(\.peer)
        for candidate in candidates.dropFirst(Self.maxInUse) {
            drop(candidate.peer, "not chosen: \(Self.maxInUse) other peers answered the probe sooner or held its chunk")
        }
    }

    /// Starts a range of `chunks` chunks and `bytes` content bytes at `now`.
    func begin(chunks: Int, bytes: Int64, at now: Instant) -> Turn {
        Turn(deadline: now + Self.budget(chunks: chunks, bytes: bytes), order: inUse ?? [], left: chunks)
    }

    /// What to do at `now` for the first chunk left in `turn` (`length` bytes): ask the first peer in
    /// use that is not dropped or paused, within its answer's allowance and the time the range has left.
    /// When the range's time is up, the peer that was answering takes an overrun.
    mutating func next(_ turn: inout Turn, length: Int, at now: Instant) -> Step {
        guard turn.left > 0 else { return .done }
        guard now < turn.deadline else {
            if turn.answers > 0, turn.position < turn.order.count { overran(turn.order[turn.position]) }
            return .origin
        }
        while turn.position < turn.order.count, !usable(turn.order[turn.position], at: now) { turn.pass() }
        guard turn.position < turn.order.count else { return .origin }
        let timeout = min(Self.allowance(Self.answerBudget, bytes: length), turn.deadline - now)
        return .ask(peer: turn.order[turn.position], timeout: timeout)
    }

    /// Takes the answer of the peer asked in `turn` for a chunk of `length` bytes, which took `elapsed`
    /// and came at `now`. Returns why the peer was dropped, when this answer dropped it.
    @discardableResult
    mutating func answered(_ answer: Answer, elapsed: Duration, length: Int, turn: inout Turn, at now: Instant) -> String? {
        guard turn.position < turn.order.count else { return nil }
        let peer = turn.order[turn.position]
        let wasDropped = records[peer].standing.dropped != nil
        if turn.answers == 0 { records[peer].rangesAsked += 1 }
        turn.answers += 1
        let allowed = Self.allowance(Self.answerBudget, bytes: length)
        // Why this answer is a strike, if it is: a failure, or an answer later than allowed.
        var struck = elapsed > allowed ? "it answered after \(Self.text(elapsed)) (\(Self.text(allowed)) allowed)" : nil
        switch answer {
        case .chunk(let installed):
            records[peer].standing.chunks += 1
            records[peer].standing.bytes += installed
            turn.delivered += 1
            turn.left -= 1
            if struck == nil { records[peer].strikes = 0 }
            if turn.left == 0 { records[peer].overruns = 0 }
        case .lacks:
            records[peer].standing.misses += 1
            if turn.delivered == 0 { missed(peer) }
            turn.pass()
        case .busy:
            records[peer].standing.misses += 1
            records[peer].pausedUntil = now + Self.pause
            turn.pass()
        case .failed(let why):
            struck = why
        case .damaged(let why):
            drop(peer, why)
        }
        if let struck { strike(peer, struck) }
        if records[peer].standing.dropped != nil, turn.position < turn.order.count, turn.order[turn.position] == peer { turn.pass() }
        return wasDropped ? nil : records[peer].standing.dropped
    }

    private func usable(_ peer: Int, at now: Instant) -> Bool {
        records[peer].standing.dropped == nil && (records[peer].pausedUntil.map { now >= $0 } ?? true)
    }

    private mutating func strike(_ peer: Int, _ why: String) {
        records[peer].strikes += 1
        if records[peer].strikes >= Self.strikes { drop(peer, "\(Self.strikes) answers in a row failed or came late (last: \(why))") }
    }

    private mutating func overran(_ peer: Int) {
        records[peer].overruns += 1
        if records[peer].overruns >= Self.overruns { drop(peer, "the time of \(Self.overruns) ranges in a row ran out while it was asked") }
    }

    private mutating func missed(_ peer: Int) {
        records[peer].rangesMissed += 1
        let (lacked, asked) = (records[peer].rangesMissed, records[peer].rangesAsked)
        if lacked >= Self.misses, lacked * 2 > asked { drop(peer, "it lacked \(lacked) of the \(asked) ranges it was asked") }
    }

    private mutating func drop(_ peer: Int, _ why: String) {
        if records[peer].standing.dropped == nil { records[peer].standing.dropped = why }
    }

    /// `duration` in seconds.
    static func seconds(_ duration: Duration) -> TimeInterval {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// `duration` for a reason: "1.80 s".
    static func text(_ duration: Duration) -> String { String(format: "%.2f s", seconds(duration)) }
}
