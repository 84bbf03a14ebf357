import Foundation

/// What a sync may spend on its peers, decided from what each one answered and when (instants of the
/// caller's clock, so tests drive it without waiting).
///
/// At most ``maxInUse`` peers are asked, discovered ones included: those that answered a probe for one
/// chunk soonest, holders first. A range walks through them in that order: a peer that lacks a chunk
/// (404) or will not give now (503) hands the rest of the range to the next one, so a lack costs one
/// request per peer and range, however many chunks. Each answer has ``answerBudget`` plus its body at
/// ``floorBytesPerSecond`` (or the lower rate the sync's cap leaves a request), and all peers together
/// have ``budget(chunks:bytes:floor:)`` per range; past it the rest of the range comes from the origin.
/// A peer that asks for a moment (503 with a Retry-After of up to ``shortWait``: its places are all
/// taken) is waited for when no other peer can be asked, within the range's time; the wait is its debt.
/// But a peer that delivers chunks and turns one request away just has no place for one more (one
/// such 503 is taken so for each chunk it delivered): the sync asks it on as many at once as it had
/// (one more after every ``slotGrowth`` chunks), its ranges waiting for a place, and owes only the
/// time such an answer took beyond ``perChunk``.
///
/// A peer is dropped for the rest of the sync when it sends bytes that fail their hash, when
/// ``strikes`` answers in a row fail or come late, when it uses up the time of ``overruns`` ranges in a
/// row, when it lacked ``misses`` ranges or more, over half of those it was asked, or when its time
/// debt passes ``maxDebt``. The debt is kept for the whole sync, whatever came between: the time its
/// answers took, less what each was worth (``perChunk``, and a chunk's bytes at the floor rate), never
/// below zero. So a peer that alternates timeouts with prompt chunks, which clears its strikes and
/// completes a range now and then, costs a sync a few seconds in all, not each range's whole time.
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
    /// The slowest a peer is waited for, all of a sync's requests to it together: a seed on a 100 Mbit/s
    /// LAN that serves four players at once gives each about 3 MiB/s. A request's share is this over the
    /// requests the sync has in flight (``Peers``).
    static let floorBytesPerSecond = 2 << 20
    /// A range's time for each of its chunks, besides their bytes: a request and the share's read.
    static let perChunk = Duration.milliseconds(25)
    /// Failed or late answers in a row after which a peer is dropped (a prompt chunk clears them).
    static let strikes = 3
    /// Ranges in a row whose time ran out while a peer was asked, after which it is dropped.
    static let overruns = 3
    /// Ranges lacked after which a peer is dropped, when they are over half of those it was asked.
    static let misses = 3
    /// The time debt after which a peer is dropped: waits beyond what its answers were worth.
    static let maxDebt = Duration.seconds(3)
    /// How long a peer that answered 503 (its game runs) is left alone.
    static let pause = Duration.seconds(30)
    /// How often a range that waits for a place at a peer (its ``Record/slots`` all in flight) looks again.
    static let slotWait = Duration.milliseconds(20)
    /// The most 503s for one request more a peer may have in hand, each earned by a chunk it delivered
    /// (a peer that sent the probe's chunk starts with them).
    static let maxPlaceCredits = 8
    /// Chunks a peer delivers after it learnt its slots before it is asked on one more at once.
    static let slotGrowth = 64
    /// The longest wait a peer may ask for (503 with Retry-After) that a range waits out rather than
    /// handing its rest to the origin, when no other peer can be asked and the range has the time.
    static let shortWait = Duration.seconds(2)

    /// What a peer answered one request with.
    enum Answer: Sendable, Equatable {
        /// The chunk, whole (and, for a fetch, matching its SHA-256 and written): `installed` content
        /// bytes, once per place the chunk goes.
        case chunk(installed: Int64)
        /// 404: it does not hold the chunk.
        case lacks
        /// 503: it will not give now (its game runs).
        case busy
        /// 503 with a Retry-After: it has no place or budget free this moment; ask again after the wait.
        case later(Duration)
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
        /// No peer can be asked now, but one that asked for a short wait (``Answer/later(_:)``) can at
        /// this instant, before the range's time is up: wait, then ask for the next step again.
        case wait(until: Instant)
        /// The rest of the range comes from the origin: its time is up, or no peer is left to ask.
        case origin
    }

    /// What the policy knows of one peer.
    struct Record: Sendable {
        var standing: Peers.Standing
        var strikes = 0
        var overruns = 0
        /// The time its answers took beyond what they were worth, over the whole sync (never below zero).
        var debt = Duration.zero
        /// Ranges it answered for, and those it lacked from the first chunk asked.
        var rangesAsked = 0
        var rangesMissed = 0
        var pausedUntil: Instant?
        /// The pause is one the peer asked for (``Answer/later(_:)``), a moment: a range waits for it.
        var shortPause = false
        /// Requests to it in flight now (asked, not answered).
        var inFlight = 0
        /// The most requests it takes at once, learnt from a 503 for one more than it had places for
        /// (nil: as many as the sync sends); one more after each ``slotGrowth`` chunks.
        var slots: Int?
        var chunksSinceSlots = 0
        /// 503s for one request more that may still be taken as a place too few: one per chunk it
        /// delivered, at most ``maxPlaceCredits``.
        var placeCredits = 0
        /// Not asked before then: it just said it had no place free.
        var notBefore: Instant?
    }

    /// One range's walk through the peers in use.
    struct Turn: Sendable {
        /// The rest of the range comes from the origin from then on (later by the time it waited for a
        /// place at a peer that was answering the sync's other requests).
        var deadline: Instant
        /// The slowest body waited for, bytes per second per request (``floorBytesPerSecond``, or less
        /// under the sync's cap).
        let floor: Int
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
    /// The peers in use, best first; nil until ``choose(_:length:floor:)``.
    private(set) var inUse: [Int]?

    /// The peers of `urls` (base URLs, a trailing slash dropped), each once, the first ``maxProbed``.
    init(urls: [String]) {
        var seen = Set<String>()
        let distinct = urls.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }.filter { seen.insert($0).inserted }
        records = distinct.prefix(Self.maxProbed).map { Record(standing: Peers.Standing(url: $0)) }
    }

    /// The time an answer may take: `budget`, plus `bytes` of body at `floor` bytes per second.
    static func allowance(_ budget: Duration, bytes: Int, floor: Int = PeerPolicy.floorBytesPerSecond) -> Duration {
        budget + body(Int64(bytes), floor: floor)
    }

    /// The time all peers together have for a range of `chunks` chunks and `bytes` content bytes: two
    /// answers' budget, ``perChunk`` for each chunk, and the bytes at `floor` bytes per second.
    static func budget(chunks: Int, bytes: Int64, floor: Int = PeerPolicy.floorBytesPerSecond) -> Duration {
        answerBudget * 2 + perChunk * chunks + body(bytes, floor: floor)
    }

    /// The time `bytes` take at `floor` bytes per second.
    static func body(_ bytes: Int64, floor: Int) -> Duration { Duration.seconds(Double(bytes) / Double(max(1, floor))) }

    /// Chooses the peers in use from a probe of each (`probes[i]`: peer i's answer for a chunk of
    /// `length` bytes, and the time it took): those that sent the chunk, then those that lack it, each
    /// the soonest first, at most ``maxInUse``. A peer that failed, was busy, sent damaged bytes or
    /// answered later than ``probeBudget`` allows (its body at `floor` bytes per second) is dropped for
    /// the sync, and so is any beyond.
    mutating func choose(
        _ probes: [(answer: Answer, elapsed: Duration)], length: Int, floor: Int = PeerPolicy.floorBytesPerSecond
    ) {
        let allowed = Self.allowance(Self.probeBudget, bytes: length, floor: floor)
        // Ranked: 0 for a peer that sent the chunk, 1 for one that lacks it; then by time, then by order.
        var candidates: [(rank: Int, elapsed: Duration, peer: Int)] = []
        for (peer, probe) in zip(records.indices, probes) {
            switch probe.answer {
            case .chunk where probe.elapsed <= allowed:
                candidates.append((0, probe.elapsed, peer))
                // It served: a sync's first requests, all at once, may find its places taken.
                records[peer].placeCredits = Self.maxPlaceCredits
            case .lacks where probe.elapsed <= allowed, .later where probe.elapsed <= allowed:
                candidates.append((1, probe.elapsed, peer))
            case .chunk, .lacks, .later:
                drop(peer, "it answered the probe after \(Self.text(probe.elapsed)) (\(Self.text(allowed)) allowed)")
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

    /// Starts a range of `chunks` chunks and `bytes` content bytes at `now`, each body waited for at
    /// `floor` bytes per second.
    func begin(chunks: Int, bytes: Int64, at now: Instant, floor: Int = PeerPolicy.floorBytesPerSecond) -> Turn {
        Turn(
            deadline: now + Self.budget(chunks: chunks, bytes: bytes, floor: floor), floor: floor, order: inUse ?? [],
            left: chunks)
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
        guard turn.position < turn.order.count else {
            // A peer that only asked for a moment (it had no place free) is waited for, not left for
            // the rest of the range: one 503 must not send a range of thousands of chunks to the origin.
            let resumes = turn.order.compactMap { peer -> Instant? in
                guard records[peer].standing.dropped == nil, let until = records[peer].pausedUntil,
                    records[peer].shortPause
                else { return nil }
                return until
            }
            guard let soonest = resumes.min(), soonest < turn.deadline,
                let position = turn.order.firstIndex(where: {
                    records[$0].pausedUntil == soonest && records[$0].shortPause
                })
            else { return .origin }
            // Back to that peer, not to the first: those before it lacked the range or are paused longer.
            turn.position = position
            turn.answers = 0
            turn.delivered = 0
            return .wait(until: soonest)
        }
        let peer = turn.order[turn.position]
        let full = records[peer].slots.map { records[peer].inFlight >= $0 } ?? false
        if full || records[peer].notBefore.map({ now < $0 }) == true {
            // It serves this sync's other ranges on all the places it has for us (or just said it had
            // none free): wait for one.
            // The wait is not the range's time: the peer spends it on this sync's other chunks, each
            // owing what it takes beyond its worth.
            let until = max(now + Self.slotWait, records[peer].notBefore ?? now)
            turn.deadline = turn.deadline + (until - now)
            return .wait(until: until)
        }
        records[peer].inFlight += 1
        let timeout = min(Self.allowance(Self.answerBudget, bytes: length, floor: turn.floor), turn.deadline - now)
        return .ask(peer: peer, timeout: timeout)
    }

    /// Takes the answer of the peer asked in `turn` for a chunk of `length` bytes, which took `elapsed`
    /// and came at `now`. Returns why the peer was dropped, when this answer dropped it.
    @discardableResult
    mutating func answered(_ answer: Answer, elapsed: Duration, length: Int, turn: inout Turn, at now: Instant)
        -> String?
    {
        guard turn.position < turn.order.count else { return nil }
        let peer = turn.order[turn.position]
        records[peer].inFlight = max(0, records[peer].inFlight - 1)
        if case .later(let wait) = answer, wait <= Self.shortWait, records[peer].placeCredits > 0 {
            return noPlace(peer, elapsed: elapsed, at: now)
        }
        let wasDropped = records[peer].standing.dropped != nil
        if turn.answers == 0 { records[peer].rangesAsked += 1 }
        turn.answers += 1
        let allowed = Self.allowance(Self.answerBudget, bytes: length, floor: turn.floor)
        // Why this answer is a strike, if it is: a failure, or an answer later than allowed.
        var struck = elapsed > allowed ? "it answered after \(Self.text(elapsed)) (\(Self.text(allowed)) allowed)" : nil
        switch answer {
        case .chunk(let installed):
            delivered(peer, bytes: installed, struck: struck != nil, turn: &turn)
        case .lacks:
            records[peer].standing.misses += 1
            if turn.delivered == 0 { missed(peer) }
            turn.pass()
        case .busy:
            records[peer].standing.misses += 1
            records[peer].pausedUntil = now + Self.pause
            records[peer].shortPause = false
            turn.pass()
        case .later(let wait):
            records[peer].standing.misses += 1
            let until = now + min(max(wait, .milliseconds(100)), Self.pause)
            // A short wait is waited out by ranges (``next(_:length:at:)``), so it is owed, once
            // (answers to requests in flight together ask for the same moment): a peer that asks for
            // waits again and again is dropped like a slow one.
            let before = max(now, records[peer].pausedUntil ?? now)
            records[peer].shortPause = wait <= Self.shortWait
            if records[peer].shortPause, until > before { owe(peer, until - before, worth: .zero) }
            records[peer].pausedUntil = max(until, records[peer].pausedUntil ?? until)
            turn.pass()
        case .failed(let why):
            struck = why
        case .damaged(let why):
            drop(peer, why)
        }
        if let struck { strike(peer, struck) }
        owe(peer, elapsed, worth: Self.worth(answer, length: length, floor: turn.floor))
        if records[peer].standing.dropped != nil, turn.position < turn.order.count, turn.order[turn.position] == peer {
            turn.pass()
        }
        return wasDropped ? nil : records[peer].standing.dropped
    }

    /// A 503 for one request more from a peer that delivers: it answers this sync's other requests (or
    /// just did: it may not have freed that place yet), so it has no place for one more. Asked on as many
    /// at once as it takes, this range waits for one of them, at least ``slotWait``; no pause, no miss.
    /// One such answer is free for each chunk it delivered (``placeCredits``), and the time it took beyond
    /// ``perChunk`` is owed: so a peer cannot slow a sync with them. Returns why it was dropped, if it was.
    private mutating func noPlace(_ peer: Int, elapsed: Duration, at now: Instant) -> String? {
        records[peer].placeCredits -= 1
        records[peer].slots = max(1, records[peer].inFlight)
        records[peer].chunksSinceSlots = 0
        records[peer].notBefore = now + Self.slotWait
        let dropped = records[peer].standing.dropped
        owe(peer, elapsed, worth: Self.perChunk)
        return dropped == nil ? records[peer].standing.dropped : nil
    }

    /// A chunk delivered: the peer's standing, its credits for places and, every ``slotGrowth`` chunks,
    /// one place more than it was found to have; an answer in time clears its strikes.
    private mutating func delivered(_ peer: Int, bytes: Int64, struck: Bool, turn: inout Turn) {
        records[peer].standing.chunks += 1
        records[peer].standing.bytes += bytes
        turn.delivered += 1
        turn.left -= 1
        records[peer].placeCredits = min(Self.maxPlaceCredits, records[peer].placeCredits + 1)
        if let slots = records[peer].slots {
            records[peer].chunksSinceSlots += 1
            if records[peer].chunksSinceSlots >= Self.slotGrowth {
                records[peer].slots = slots + 1
                records[peer].chunksSinceSlots = 0
            }
        }
        if !struck { records[peer].strikes = 0 }
        if turn.left == 0 { records[peer].overruns = 0 }
    }

    /// The request to the peer asked in `turn` ended without an answer (writing its chunk failed here).
    mutating func abandoned(_ turn: Turn) {
        guard turn.position < turn.order.count else { return }
        records[turn.order[turn.position]].inFlight = max(0, records[turn.order[turn.position]].inFlight - 1)
    }

    private func usable(_ peer: Int, at now: Instant) -> Bool {
        records[peer].standing.dropped == nil && (records[peer].pausedUntil.map { now >= $0 } ?? true)
    }

    private mutating func strike(_ peer: Int, _ why: String) {
        records[peer].strikes += 1
        if records[peer].strikes >= Self.strikes {
            drop(peer, "\(Self.strikes) answers in a row failed or came late (last: \(why))")
        }
    }

    /// What an answer was worth in time: ``perChunk`` for one that came (a chunk, a lack, a 503), and a
    /// chunk's bytes at `floor` bytes per second; nothing for a failure.
    static func worth(_ answer: Answer, length: Int, floor: Int) -> Duration {
        switch answer {
        case .chunk: return perChunk + body(Int64(length), floor: floor)
        case .lacks, .busy, .later: return perChunk
        case .failed, .damaged: return .zero
        }
    }

    /// Adds to `peer`'s debt the time an answer took beyond its `worth`; drops it past ``maxDebt``.
    private mutating func owe(_ peer: Int, _ elapsed: Duration, worth: Duration) {
        records[peer].debt = max(.zero, records[peer].debt + elapsed - worth)
        if records[peer].debt > Self.maxDebt {
            drop(
                peer,
                "its answers took \(Self.text(records[peer].debt)) more than they were worth (\(Self.text(Self.maxDebt)) allowed in a sync)"
            )
        }
    }

    private mutating func overran(_ peer: Int) {
        records[peer].overruns += 1
        if records[peer].overruns >= Self.overruns {
            drop(peer, "the time of \(Self.overruns) ranges in a row ran out while it was asked")
        }
    }

    private mutating func missed(_ peer: Int) {
        records[peer].rangesMissed += 1
        let (lacked, asked) = (records[peer].rangesMissed, records[peer].rangesAsked)
        if lacked >= Self.misses, lacked * 2 > asked {
            drop(peer, "it lacked \(lacked) of the \(asked) ranges it was asked")
        }
    }

    private mutating func drop(_ peer: Int, _ why: String) {
        if records[peer].standing.dropped == nil { records[peer].standing.dropped = why }
    }

    /// `duration` for a reason: "1.80 s".
    static func text(_ duration: Duration) -> String { String(format: "%.2f s", duration.inSeconds) }
}
