import Testing

@testable import PatchSync

/// What a sync may spend on LAN peers, driven by instants the tests choose: no request, no waiting.
@Suite("LAN peers: what a sync may spend on them", .tags(.small))
struct PeerPolicyTests {
    typealias Instant = ContinuousClock.Instant

    static let start = ContinuousClock.now
    /// The chunk size of these ranges: the chunker's average.
    static let chunk = 256 << 10

    /// A policy whose probe found `count` peers that hold the chunk, peer 0 the soonest.
    static func chosen(_ count: Int) -> PeerPolicy {
        var policy = PeerPolicy(urls: (0..<count).map { "http://10.0.0.\($0 + 1):27472" })
        policy.choose(
            (0..<count).map {
                (answer: PeerPolicy.Answer.chunk(installed: 0), elapsed: Duration.milliseconds(10 * ($0 + 1)))
            }, length: chunk)
        return policy
    }

    /// One range of `chunks` chunks from `start`: each request goes to the peer the policy names, which
    /// answers `answer(peer)` after its time, or is cut at the request's timeout (a failure). Returns the
    /// peers asked, request by request, the step that ended the range, and when.
    static func walk(
        _ policy: inout PeerPolicy, chunks: Int, from start: Instant, answer: (Int) -> (PeerPolicy.Answer, Duration)
    ) -> (asked: [Int], end: PeerPolicy.Step, at: Instant) {
        var turn = policy.begin(chunks: chunks, bytes: Int64(chunks * Self.chunk), at: start)
        var (now, asked) = (start, [Int]())
        for _ in 0..<10_000 {
            let step = policy.next(&turn, length: Self.chunk, at: now)
            guard case .ask(let peer, let timeout) = step else { return (asked, step, now) }
            asked.append(peer)
            var (reply, took) = answer(peer)
            if took > timeout {
                reply = .failed("timed out after \(timeout)")
                took = timeout
            }
            now = now + took
            policy.answered(reply, elapsed: took, length: Self.chunk, turn: &turn, at: now)
        }
        Issue.record("the range never ended")
        return (asked, .origin, now)
    }

    @Test(
        "a peer that lacks a range's first chunk is asked nothing more of it: the next peer is, then the origin; a range of 64 chunks no peer holds costs one request per peer"
    )
    func lackCostsOneRequestPerRange() {
        var policy = Self.chosen(3)
        let walk = Self.walk(&policy, chunks: 64, from: Self.start) { _ in (.lacks, .milliseconds(2)) }
        #expect(walk.asked == [0, 1, 2])
        #expect(walk.end == .origin)
        #expect(policy.records.map(\.standing.misses) == [1, 1, 1])
        #expect(policy.records.allSatisfy { $0.standing.dropped == nil }, "one range lacked drops no one")
    }

    @Test(
        "a peer that lacks three ranges, over half of those it was asked, is dropped for the sync and asked nothing more; one that serves most ranges and lacks some is kept"
    )
    func repeatedLacksDrop() {
        var empty = Self.chosen(1)
        for range in 0..<PeerPolicy.misses {
            let walk = Self.walk(&empty, chunks: 64, from: Self.start + .seconds(range)) { _ in
                (.lacks, .milliseconds(2))
            }
            #expect(walk.asked == [0], "range \(range): one request")
        }
        #expect(
            empty.records[0].standing.dropped?.contains("lacked 3 of the 3 ranges") == true,
            "\(empty.records[0].standing)")
        let after = Self.walk(&empty, chunks: 64, from: Self.start + .seconds(10)) { _ in (.lacks, .milliseconds(2)) }
        #expect(after.asked.isEmpty && after.end == .origin)

        var partial = Self.chosen(1)
        for range in 0..<9 {
            let lacks = range % 3 == 0
            _ = Self.walk(&partial, chunks: 4, from: Self.start + .seconds(range)) { _ in
                (lacks ? .lacks : .chunk(installed: 1), .milliseconds(2))
            }
        }
        #expect(partial.records[0].standing.dropped == nil, "3 of 9 ranges lacked: \(partial.records[0].standing)")
        #expect(partial.records[0].standing.chunks == 24)
    }

    @Test(
        "an answer later than the answer budget is a strike, a 404 too: a peer that answers every chunk 404 after 1.8 s is cut at its answer's allowance and dropped after three, under 2 s in all, not a wait per chunk"
    )
    func lateAnswersStrike() {
        var policy = Self.chosen(2)
        let walk = Self.walk(&policy, chunks: 64, from: Self.start) { peer in
            (peer == 0 ? .lacks : .chunk(installed: 1), .milliseconds(peer == 0 ? 1800 : 5))
        }
        #expect(
            walk.asked == [0, 0, 0] + Array(repeating: 1, count: 64),
            "three requests to the late peer, then the other serves the range")
        #expect(walk.end == .done)
        let allowed = PeerPolicy.allowance(PeerPolicy.answerBudget, bytes: Self.chunk)
        #expect(allowed == .milliseconds(625), "0.5 s, and 256 KiB at 2 MiB/s")
        #expect(walk.at - Self.start == allowed * 3 + .milliseconds(5) * 64)
        #expect(
            policy.records[0].standing.dropped?.contains("3 answers in a row failed or came late") == true,
            "\(policy.records[0].standing)")

        // An answer that does come, after its allowance, is a strike too; a prompt chunk clears the strikes.
        var slow = Self.chosen(1)
        var turn = slow.begin(chunks: 8, bytes: Int64(8 * Self.chunk), at: Self.start)
        _ = slow.next(&turn, length: Self.chunk, at: Self.start)
        slow.answered(
            .chunk(installed: 1), elapsed: .milliseconds(900), length: Self.chunk, turn: &turn,
            at: Self.start + .milliseconds(900))
        #expect(slow.records[0].strikes == 1, "a chunk 0.9 s late is a strike")
        slow.answered(
            .chunk(installed: 1), elapsed: .milliseconds(5), length: Self.chunk, turn: &turn,
            at: Self.start + .milliseconds(905))
        #expect(slow.records[0].strikes == 0, "a prompt chunk clears it")
    }

    @Test(
        "a peer that fails now and then is kept (a prompt chunk clears its strikes); three failures in a row drop it, and the rest of the range goes to the origin"
    )
    func failuresInARowDrop() {
        var policy = Self.chosen(1)
        var replies: [PeerPolicy.Answer] = [
            .failed("reset"), .chunk(installed: 1), .failed("reset"), .failed("reset"), .chunk(installed: 1),
            .failed("refused"), .failed("refused"), .failed("refused")
        ]
        let walk = Self.walk(&policy, chunks: 64, from: Self.start) { _ in (replies.removeFirst(), .milliseconds(2)) }
        #expect(walk.asked.count == 8 && walk.end == .origin)
        #expect(policy.records[0].standing.chunks == 2)
        #expect(policy.records[0].standing.dropped?.contains("last: refused") == true, "\(policy.records[0].standing)")
    }

    @Test(
        "each request to a peer is cut at the answer budget plus its chunk at the floor rate, never past the range's time, which all peers share; then the rest goes to the origin"
    )
    func requestTimeouts() {
        var policy = Self.chosen(1)
        let budget = PeerPolicy.budget(chunks: 2, bytes: 2 << 20)
        #expect(budget == .milliseconds(2050), "two answers' budget, 25 ms a chunk, 2 MiB at 2 MiB/s")
        var turn = policy.begin(chunks: 2, bytes: 2 << 20, at: Self.start)
        #expect(policy.next(&turn, length: 1 << 20, at: Self.start) == .ask(peer: 0, timeout: .seconds(1)))
        #expect(
            policy.next(&turn, length: 1 << 20, at: Self.start + .milliseconds(1800))
                == .ask(peer: 0, timeout: .milliseconds(250)))
        #expect(policy.next(&turn, length: 1 << 20, at: Self.start + budget) == .origin)
    }

    @Test(
        "a peer that sends every chunk just inside the answer budget (0.49 s) is cut when a range's time is up, the rest of the range going to the origin; its time debt, a third of a second a chunk, drops it within 3 s of debt, in its first long range"
    )
    func slowDripRunsUpDebt() {
        var policy = Self.chosen(1)
        let budget = PeerPolicy.budget(chunks: 4, bytes: Int64(4 * Self.chunk))
        let short = Self.walk(&policy, chunks: 4, from: Self.start) { _ in (.chunk(installed: 1), .milliseconds(490)) }
        #expect(short.end == .origin && short.at - Self.start == budget, "the range ends at its \(budget)")
        #expect(
            short.asked.count == 4 && policy.records[0].standing.chunks == 3,
            "three chunks, then cut at the range's time")
        #expect(policy.records[0].standing.dropped == nil)

        let long = Self.walk(&policy, chunks: 64, from: short.at) { _ in (.chunk(installed: 1), .milliseconds(490)) }
        #expect(long.end == .origin && long.asked.count < 9, "\(long.asked.count) chunks of 64")
        #expect(long.at - short.at < PeerPolicy.maxDebt + .seconds(1), "dropped after \(long.at - short.at)")
        #expect(
            policy.records[0].standing.dropped?.contains("more than they were worth") == true,
            "\(policy.records[0].standing)")
    }

    @Test(
        "a range a peer completes clears its overruns, and its prompt chunks pay back its time debt: a peer slow every other range is kept; one slow two ranges in a row (which a completed range between once excused) is dropped in the second by its debt"
    )
    func slowRangesRunUpDebt() {
        var kept = Self.chosen(1)
        var now = Self.start
        for slow in [true, false, true, false, true] {
            let walk = Self.walk(&kept, chunks: 16, from: now) { _ in
                (.chunk(installed: 1), .milliseconds(slow ? 490 : 5))
            }
            #expect(walk.end == (slow ? PeerPolicy.Step.origin : PeerPolicy.Step.done))
            now = walk.at
        }
        #expect(kept.records[0].overruns == 1 && kept.records[0].standing.dropped == nil, "\(kept.records[0].standing)")
        #expect(kept.records[0].debt <= PeerPolicy.maxDebt)

        var dropped = Self.chosen(1)
        now = Self.start
        for range in 0..<2 {
            let walk = Self.walk(&dropped, chunks: 16, from: now) { _ in (.chunk(installed: 1), .milliseconds(490)) }
            #expect(walk.end == .origin, "range \(range)")
            now = walk.at
        }
        #expect(dropped.records[0].overruns < PeerPolicy.overruns, "two overruns: not what dropped it")
        #expect(
            dropped.records[0].standing.dropped?.contains("more than they were worth") == true,
            "\(dropped.records[0].standing)")
    }

    @Test(
        "a peer that alternates timeouts with prompt chunks, so that each chunk clears its strikes and every range completes, is dropped once it cost the sync 3 s more than its chunks were worth: within three ranges and 4 s of waiting in all, not a timeout every other chunk for as long as the sync runs"
    )
    func alternatingPeerDropped() {
        var policy = Self.chosen(1)
        var (now, answers, ranges, waited) = (Self.start, 0, 0, Duration.zero)
        while policy.records[0].standing.dropped == nil, ranges < 100 {
            let walk = Self.walk(&policy, chunks: 2, from: now) { _ -> (PeerPolicy.Answer, Duration) in
                answers += 1
                if answers % 2 == 1 { return (.failed("timed out"), .seconds(10)) }
                return (.chunk(installed: 1), .milliseconds(5))
            }
            waited += walk.at - now
            now = walk.at + .milliseconds(100)
            ranges += 1
        }
        let record = policy.records[0]
        #expect(
            record.standing.dropped?.contains("more than they were worth") == true,
            "\(record.standing) after \(ranges) ranges")
        #expect(ranges <= 3 && waited < .seconds(4), "dropped in range \(ranges), after \(waited) spent on it")
        #expect(
            record.strikes < PeerPolicy.strikes && record.overruns == 0,
            "neither strikes nor overruns would have dropped it")
    }

    @Test(
        "under the sync's cap a peer is waited for at the rate a connection has: its request's timeout and the range's time stretch to it, and a chunk that takes that long is no strike and no debt"
    )
    func capStretchesTheFloor() {
        var policy = Self.chosen(1)
        let floor = 64 << 10  // 512 KiB/s over 8 connections
        var turn = policy.begin(chunks: 1, bytes: Int64(Self.chunk), at: Self.start, floor: floor)
        #expect(
            policy.next(&turn, length: Self.chunk, at: Self.start) == .ask(peer: 0, timeout: .milliseconds(4500)),
            "0.5 s, and 256 KiB at 64 KiB/s")
        policy.answered(
            .chunk(installed: 1), elapsed: .seconds(4), length: Self.chunk, turn: &turn, at: Self.start + .seconds(4))
        #expect(policy.records[0].strikes == 0 && policy.records[0].debt == .zero, "\(policy.records[0])")
        #expect(policy.next(&turn, length: Self.chunk, at: Self.start + .seconds(4)) == .done)
    }

    @Test("a peer that answers 503 (its game runs) is skipped for 30 s, then asked again, and never dropped for it")
    func busyPeerPaused() {
        var policy = Self.chosen(2)
        let first = Self.walk(&policy, chunks: 4, from: Self.start) { peer in
            (peer == 0 ? .busy : .chunk(installed: 1), .milliseconds(2))
        }
        #expect(first.asked == [0, 1, 1, 1, 1] && first.end == .done)
        let soon = Self.walk(&policy, chunks: 1, from: Self.start + .seconds(10)) { _ in
            (.chunk(installed: 1), .milliseconds(2))
        }
        #expect(soon.asked == [1])
        let later = Self.walk(&policy, chunks: 1, from: Self.start + .seconds(31)) { _ in
            (.chunk(installed: 1), .milliseconds(2))
        }
        #expect(later.asked == [0])
        #expect(policy.records[0].standing.dropped == nil && policy.records[0].standing.misses == 1)
    }

    @Test("bytes that fail their hash drop the peer at once, and the next peer is asked for the same chunk")
    func damagedBytesDrop() {
        var policy = Self.chosen(2)
        let walk = Self.walk(&policy, chunks: 3, from: Self.start) { peer in
            (
                peer == 0 ? .damaged("it sent a chunk that does not match its signed SHA-256") : .chunk(installed: 1),
                .milliseconds(2)
            )
        }
        #expect(walk.asked == [0, 1, 1, 1] && walk.end == .done)
        #expect(policy.records[0].standing.dropped?.contains("SHA-256") == true)
        #expect(policy.records[1].standing.chunks == 3)
    }

    @Test(
        "at most three peers are used and eight probed, discovered ones included: the probe picks those that sent the chunk, then those that lack it, the soonest first; a failed, busy, damaged or late peer, and any beyond three, is dropped with the reason"
    )
    func probeChoosesAFew() {
        var policy = PeerPolicy(urls: (1...12).map { "http://10.0.0.\($0):27472/" } + ["http://10.0.0.1:27472"])
        #expect(policy.records.count == PeerPolicy.maxProbed, "12 peers (one given twice): the first 8 are kept")
        #expect(policy.records[0].standing.url == "http://10.0.0.1:27472", "without its trailing slash")
        policy.choose(
            [
                (.lacks, .milliseconds(5)), (.chunk(installed: 0), .milliseconds(40)),
                (.failed("connection refused"), .milliseconds(1)),
                (.chunk(installed: 0), .milliseconds(1800)), (.busy, .milliseconds(3)),
                (.damaged("does not match its signed SHA-256"), .milliseconds(3)),
                (.chunk(installed: 0), .milliseconds(20)), (.lacks, .milliseconds(9))
            ], length: 64 << 10)
        #expect(policy.inUse == [6, 1, 0])
        let dropped = policy.records.map(\.standing.dropped)
        #expect([0, 1, 6].allSatisfy { dropped[$0] == nil })
        #expect(dropped[2]?.contains("connection refused") == true)
        #expect(dropped[3]?.contains("answered the probe after 1.80 s") == true, "\(dropped[3] ?? "")")
        #expect(dropped[4]?.contains("503") == true)
        #expect(dropped[5]?.contains("SHA-256") == true)
        #expect(dropped[7]?.hasPrefix("not chosen") == true)
        let walk = Self.walk(&policy, chunks: 2, from: Self.start) { _ in (.lacks, .milliseconds(2)) }
        #expect(walk.asked == [6, 1, 0], "a range asks the peers in use, best first, and no other")
    }

    @Test(
        "a network that announces twenty shares of the game gives a sync the first eight: discovered peers are capped")
    func discoveryCapped() {
        let repo = String(repeating: "a", count: 64)
        let browse = (1...20).map {
            "=;eth0;IPv4;PatchSync on p\($0);_patchsync._tcp;local;p\($0).local;10.0.0.\($0);27472;\"repo=\(repo)\""
        }
        #expect(
            PeerDiscovery.peers(inBrowseOutput: browse.joined(separator: "\n"), repository: repo)
                == (1...8).map { "http://10.0.0.\($0):27472" })
    }

    @Test(
        "regression: a 503 with a short Retry-After (no place free this moment) leaves the peer alone only that long, not the 30 s of a running game (two of four players got almost nothing from the seed)"
    )
    func shortRetryAfter() {
        var policy = PeerPolicy(urls: ["http://a"])
        policy.choose([(.chunk(installed: 1), .milliseconds(5))], length: 1)
        var turn = policy.begin(chunks: 2, bytes: 2, at: Self.start)
        guard case .ask(let peer, _) = policy.next(&turn, length: 1, at: Self.start) else {
            Issue.record("the peer is asked")
            return
        }
        policy.answered(.later(.seconds(5)), elapsed: .milliseconds(2), length: 1, turn: &turn, at: Self.start)
        #expect(
            policy.next(&turn, length: 1, at: Self.start + .milliseconds(3)) == .origin,
            "the rest of this range from the origin")
        var soon = policy.begin(chunks: 1, bytes: 1, at: Self.start + .seconds(4))
        #expect(policy.next(&soon, length: 1, at: Self.start + .seconds(4)) == .origin, "still within its Retry-After")
        var after = policy.begin(chunks: 1, bytes: 1, at: Self.start + .seconds(6))
        #expect(
            policy.next(&after, length: 1, at: Self.start + .seconds(6))
                == .ask(peer: peer, timeout: PeerPolicy.allowance(PeerPolicy.answerBudget, bytes: 1)),
            "asked again once it passed")
        #expect(policy.records[peer].standing.dropped == nil)
    }

    @Test(
        "regression: a peer that asks for a moment (503, Retry-After: 1: its places are taken) is waited for when the range has the time, not left for the rest of a range of thousands of chunks (two players of four took 144 and 164 MB from the origin)"
    )
    func momentIsWaited() {
        var policy = PeerPolicy(urls: ["http://a"])
        policy.choose([(.lacks, .milliseconds(5))], length: 1)  // in use, with no chunk sent yet
        var turn = policy.begin(chunks: 2000, bytes: 20 << 20, at: Self.start)
        guard case .ask(let peer, _) = policy.next(&turn, length: 1, at: Self.start) else {
            Issue.record("the peer is asked")
            return
        }
        policy.answered(.later(.seconds(1)), elapsed: .milliseconds(2), length: 1, turn: &turn, at: Self.start)
        #expect(
            policy.next(&turn, length: 1, at: Self.start + .milliseconds(3)) == .wait(until: Self.start + .seconds(1)))
        #expect(
            policy.next(&turn, length: 1, at: Self.start + .seconds(1))
                == .ask(peer: peer, timeout: PeerPolicy.allowance(PeerPolicy.answerBudget, bytes: 1)),
            "asked again once it passed")
        var short = policy.begin(chunks: 1, bytes: 1, at: Self.start + .seconds(1))
        policy.answered(
            .later(.seconds(2)), elapsed: .milliseconds(2), length: 1, turn: &short, at: Self.start + .seconds(1))
        #expect(
            policy.next(&short, length: 1, at: Self.start + .seconds(1)) == .origin,
            "a range whose time ends before the wait does not wait")
    }

    @Test(
        "a peer that asks for a moment again and again is dropped: each wait ranges spent on it is its debt, counted once for answers that came together"
    )
    func momentsAreOwed() {
        var policy = PeerPolicy(urls: ["http://a"])
        policy.choose([(.lacks, .milliseconds(5))], length: 1)  // in use, with no chunk sent yet
        var now = Self.start
        for _ in 0..<3 {
            var turns = (0..<6).map { _ in policy.begin(chunks: 100, bytes: 1 << 20, at: now) }
            for index in turns.indices {
                _ = policy.next(&turns[index], length: 1, at: now)
                policy.answered(.later(.seconds(1)), elapsed: .milliseconds(1), length: 1, turn: &turns[index], at: now)
            }
            #expect(policy.records[0].standing.dropped == nil, "six answers at once owe one second, not six")
            now = now + .seconds(1)
        }
        var last = policy.begin(chunks: 100, bytes: 1 << 20, at: now)
        _ = policy.next(&last, length: 1, at: now)
        policy.answered(.later(.seconds(1)), elapsed: .milliseconds(1), length: 1, turn: &last, at: now)
        #expect(policy.records[0].standing.dropped?.contains("more than they were worth") == true)
        #expect(policy.next(&last, length: 1, at: now) == .origin)
    }

    @Test(
        "regression: a peer that delivers chunks and turns away one more request (503, Retry-After: 1) while it answers the sync's others is asked on as many at once as it takes, the range waiting for a place: no pause, no miss, and one more place after 64 chunks (with its places shared, every player of four lost the seed to its debt)"
    )
    func placesAreLearnt() {
        var policy = PeerPolicy(urls: ["http://a"])
        policy.choose([(.chunk(installed: 1), .milliseconds(5))], length: 1)
        var turns = (0..<3).map { _ in policy.begin(chunks: 1000, bytes: 10 << 20, at: Self.start) }
        _ = policy.next(&turns[0], length: 1, at: Self.start)
        policy.answered(.chunk(installed: 1), elapsed: .milliseconds(1), length: 1, turn: &turns[0], at: Self.start)
        for index in turns.indices { #expect(policy.next(&turns[index], length: 1, at: Self.start) != .origin) }
        #expect(policy.records[0].inFlight == 3)
        policy.answered(.later(.seconds(1)), elapsed: .milliseconds(1), length: 1, turn: &turns[2], at: Self.start)
        #expect(policy.records[0].slots == 2 && policy.records[0].pausedUntil == nil && policy.records[0].debt == .zero)
        #expect(policy.records[0].standing.misses == 0)
        #expect(
            policy.next(&turns[2], length: 1, at: Self.start) == .wait(until: Self.start + PeerPolicy.slotWait),
            "both places are taken")
        policy.answered(.chunk(installed: 1), elapsed: .milliseconds(1), length: 1, turn: &turns[0], at: Self.start)
        guard case .ask = policy.next(&turns[2], length: 1, at: Self.start + PeerPolicy.slotWait) else {
            Issue.record("a place came free")
            return
        }
        var now = Self.start + PeerPolicy.slotWait
        for _ in 0..<PeerPolicy.slotGrowth {
            policy.answered(.chunk(installed: 1), elapsed: .milliseconds(1), length: 1, turn: &turns[2], at: now)
            now = now + .milliseconds(1)
            _ = policy.next(&turns[2], length: 1, at: now)
        }
        #expect(policy.records[0].slots == 3, "one more place after \(PeerPolicy.slotGrowth) chunks")
        #expect(policy.records[0].standing.dropped == nil)
    }

    @Test(
        "a peer cannot slow a sync with 503s for one request more: one is taken as a place too few for each chunk it delivered (eight for the probe's), its time beyond the answer's worth is owed, and the range waits between them; past its chunks, a 503 pauses it and is owed whole"
    )
    func placesAreEarned() {
        var policy = PeerPolicy(urls: ["http://a"])
        policy.choose([(.lacks, .milliseconds(5))], length: 1)  // in use, with no chunk sent yet
        var turn = policy.begin(chunks: 1000, bytes: 10 << 20, at: Self.start)
        var now = Self.start
        _ = policy.next(&turn, length: 1, at: now)
        policy.answered(.chunk(installed: 1), elapsed: .milliseconds(1), length: 1, turn: &turn, at: now)
        _ = policy.next(&turn, length: 1, at: now)
        now = now + .milliseconds(450)
        policy.answered(.later(.seconds(0)), elapsed: .milliseconds(450), length: 1, turn: &turn, at: now)
        #expect(policy.records[0].debt == .milliseconds(425), "a slow 503 is owed beyond its worth")
        #expect(
            policy.next(&turn, length: 1, at: now) == .wait(until: now + PeerPolicy.slotWait), "not asked again at once"
        )
        now = now + PeerPolicy.slotWait
        _ = policy.next(&turn, length: 1, at: now)
        policy.answered(.later(.seconds(1)), elapsed: .milliseconds(1), length: 1, turn: &turn, at: now)
        #expect(policy.records[0].pausedUntil == now + .seconds(1), "no chunk since: a pause")
        #expect(policy.records[0].debt > .seconds(1))
    }

    @Test(
        "regression: after waiting out a peer's moment, a range asks that peer again, not the one before it that lacked the range (it was asked again and again and dropped as lacking every range)"
    )
    func waitResumesAtThePausedPeer() {
        var policy = PeerPolicy(urls: ["http://10.0.0.1:27472", "http://10.0.0.2:27472"])
        policy.choose([(.lacks, .milliseconds(5)), (.lacks, .milliseconds(6))], length: 1)
        var turn = policy.begin(chunks: 100, bytes: 1 << 20, at: Self.start)
        #expect(
            policy.next(&turn, length: 1, at: Self.start)
                == .ask(peer: 0, timeout: PeerPolicy.allowance(PeerPolicy.answerBudget, bytes: 1)))
        policy.answered(.lacks, elapsed: .milliseconds(1), length: 1, turn: &turn, at: Self.start)
        guard case .ask(1, _) = policy.next(&turn, length: 1, at: Self.start) else {
            Issue.record("the second peer is asked")
            return
        }
        policy.answered(.later(.seconds(1)), elapsed: .milliseconds(1), length: 1, turn: &turn, at: Self.start)
        #expect(policy.next(&turn, length: 1, at: Self.start) == .wait(until: Self.start + .seconds(1)))
        guard case .ask(1, _) = policy.next(&turn, length: 1, at: Self.start + .seconds(1)) else {
            Issue.record("the peer that asked for the moment is asked again, not the one that lacked the range")
            return
        }
        #expect(policy.records[0].rangesAsked == 1)
    }
}
