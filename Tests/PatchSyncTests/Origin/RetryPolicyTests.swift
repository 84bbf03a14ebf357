import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// Issue: one mirror policy. The retry decisions, stepped with a timeline of instants and a fixed
/// jitter: nothing sleeps.
@Suite("Retry policy and mirror group", .tags(.small))
struct RetryPolicyTests {
    let t0 = ContinuousClock.now

    /// Fails the attempt `decision` names with `failure`; returns the next decision.
    static func fail(
        _ request: inout RetryPolicy, _ decision: RetryPolicy.Decision, with failure: TransferFailure,
        group: inout MirrorGroup, at now: ContinuousClock.Instant, progressed: Bool = false,
        random: Double = 0.5
    ) -> RetryPolicy.Decision {
        guard case .attempt(let mirror, _) = decision else { return .giveUp }
        return request.next(after: failure, on: mirror, progressed: progressed, group: &group, now: now, random: random)
    }

    @Test("eight failures in a row with no progress give up, whichever requests they hit")
    func streakGivesUp() {
        var group = MirrorGroup(mirrors: 1)
        var requests = (0..<8).map { _ in RetryPolicy() }
        var decisions = requests.indices.map { requests[$0].start(group, now: t0) }
        for index in 0..<7 {
            decisions[index] = Self.fail(
                &requests[index], decisions[index], with: .httpStatus(503), group: &group, at: t0)
            #expect(decisions[index] != .giveUp, "failure \(index + 1) of the streak")
        }
        #expect(Self.fail(&requests[7], decisions[7], with: .network("refused"), group: &group, at: t0) == .giveUp)
        #expect(group.isExhausted)
        #expect(
            Self.fail(&requests[0], decisions[0], with: .httpStatus(503), group: &group, at: t0) == .giveUp,
            "the others give up at their next failure")
        #expect(requests[7].failures.map { $0.mirror } == [0])
    }

    @Test("when every request in flight fails at once, the later retries back off longer")
    func sharedBackoff() {
        var group = MirrorGroup(mirrors: 1)
        var requests = (0..<6).map { _ in RetryPolicy() }
        let decisions = requests.indices.map { requests[$0].start(group, now: t0) }
        let retries = requests.indices.map {
            Self.fail(
                &requests[$0], decisions[$0], with: .network("Network is unreachable"), group: &group, at: t0,
                random: 0.5)
        }
        #expect(retries.first == .attempt(mirror: 0, after: RetryPolicy.backoff(1, random: 0.5)))
        #expect(retries.last == .attempt(mirror: 0, after: RetryPolicy.backoff(6, random: 0.5)))
        #expect(RetryPolicy.backoff(6, random: 0.5) == .milliseconds(2500))
    }

    @Test("the limit is configurable: a streak of one gives up at the first failure")
    func configurableStreak() {
        var group = MirrorGroup(mirrors: 1, failureStreak: 1)
        var request = RetryPolicy()
        let first = request.start(group, now: t0)
        #expect(Self.fail(&request, first, with: .httpStatus(503), group: &group, at: t0) == .giveUp)
    }

    @Test("any progress resets the streak: a request that completes lets the others go on")
    func progressResets() {
        var group = MirrorGroup(mirrors: 1)
        var request = RetryPolicy()
        var decision = request.start(group, now: t0)
        for _ in 0..<7 { decision = Self.fail(&request, decision, with: .httpStatus(503), group: &group, at: t0) }
        #expect(group.streak == 7)
        group.progressed()  // another request delivered
        for _ in 0..<7 { decision = Self.fail(&request, decision, with: .httpStatus(503), group: &group, at: t0) }
        #expect(
            decision == .attempt(mirror: 0, after: RetryPolicy.backoff(14, random: 0.5)),
            "14 failures of one request, still retried")
    }

    @Test("a response cut short that delivered bytes counts as progress, and its request goes on")
    func shortResponseProgresses() {
        var group = MirrorGroup(mirrors: 1)
        var request = RetryPolicy()
        var decision = request.start(group, now: t0)
        for _ in 0..<7 { decision = Self.fail(&request, decision, with: .network("reset"), group: &group, at: t0) }
        decision = Self.fail(
            &request, decision, with: .network("closed with 10 bytes remaining"), group: &group,
            at: t0, progressed: true, random: 0.999)
        #expect(group.streak == 0 && request.failuresInARow == 1)
        #expect(
            decision == .attempt(mirror: 0, after: RetryPolicy.backoff(1, random: 0.999)), "the first backoff again")
    }

    @Test(
        "an origin failing 30% of requests at random is never given up on, though single requests fail 3 times and more",
        arguments: 1...20)
    func thirtyPercent(seed: Int) {
        var rng = SplitMix(seed: UInt64(seed))
        var group = MirrorGroup(mirrors: 1)
        var longest = 0
        for object in 0..<300 {
            var request = RetryPolicy()
            var decision = request.start(group, now: t0)
            while case .attempt = decision, rng.unit() < 0.3 {
                decision = Self.fail(&request, decision, with: .httpStatus(503), group: &group, at: t0)
            }
            guard decision != .giveUp else {
                Issue.record("seed \(seed): object \(object) given up after \(request.failuresInARow) failures")
                return
            }
            group.progressed()
            longest = max(longest, request.failuresInARow)
        }
        #expect(
            longest >= 3, "some request failed 3 times in a row: the old per-request budget would have ended the sync")
    }

    @Test("Retry-After is honoured on the same mirror, up to 30 s; it does not hold back another mirror")
    func retryAfter() {
        var group = MirrorGroup(mirrors: 1)
        var request = RetryPolicy()
        var decision = request.start(group, now: t0)
        decision = Self.fail(&request, decision, with: .httpStatus(503, retryAfter: .seconds(3)), group: &group, at: t0)
        #expect(decision == .attempt(mirror: 0, after: .seconds(3)))
        decision = Self.fail(
            &request, decision, with: .httpStatus(429, retryAfter: .seconds(3600)), group: &group, at: t0)
        #expect(decision == .attempt(mirror: 0, after: RetryPolicy.maxRetryAfter))
        #expect(RetryPolicy.maxRetryAfter == .seconds(30))
        decision = Self.fail(
            &request, decision, with: .httpStatus(503, retryAfter: .zero), group: &group, at: t0, random: 0.5)
        #expect(
            decision == .attempt(mirror: 0, after: RetryPolicy.backoff(3, random: 0.5)), "never less than the backoff")

        var two = MirrorGroup(mirrors: 2)
        var other = RetryPolicy()
        let first = other.start(two, now: t0)
        #expect(
            Self.fail(&other, first, with: .httpStatus(503, retryAfter: .seconds(20)), group: &two, at: t0)
                == .attempt(mirror: 1, after: .zero))
    }

    @Test("a non-retryable answer moves to the next mirror at once; when every mirror answered, the request fails")
    func nonRetryableMovesOn() {
        var group = MirrorGroup(mirrors: 3)
        var request = RetryPolicy()
        var decision = request.start(group, now: t0)
        #expect(decision == .attempt(mirror: 0, after: .zero))
        decision = Self.fail(&request, decision, with: .notFound, group: &group, at: t0)
        #expect(decision == .attempt(mirror: 1, after: .zero))
        decision = Self.fail(&request, decision, with: .httpStatus(400), group: &group, at: t0)
        #expect(decision == .attempt(mirror: 2, after: .zero))
        decision = Self.fail(&request, decision, with: .notFound, group: &group, at: t0)
        #expect(decision == .giveUp)
        #expect(group.streak == 0 && group.order(now: t0) == [0, 1, 2], "answers are not failures of the origin")
        #expect(request.failures.map { $0.mirror } == [0, 1, 2])
    }

    @Test(
        "a whole file that fails its hash is that mirror's failure: the next mirror is asked at once, the damaged one never again for that file, and when every mirror served it damaged the request ends in refused data (65)"
    )
    func damagedCopyMovesOn() {
        var group = MirrorGroup(mirrors: 2)
        var request = RetryPolicy()
        var decision = request.start(group, now: t0)
        decision = Self.fail(
            &request, decision, with: .damaged("does not match its signed SHA-256"), group: &group, at: t0)
        #expect(decision == .attempt(mirror: 1, after: .zero))
        #expect(
            group.streak == 1 && group.order(now: t0) == [1, 0], "it counts in the streak, and the mirror cools down")
        decision = Self.fail(&request, decision, with: .network("reset"), group: &group, at: t0)
        #expect(
            decision == .attempt(mirror: 1, after: RetryPolicy.backoff(2, random: 0.5)),
            "the other mirror again, though both are cooling")
        decision = Self.fail(
            &request, decision, with: .damaged("does not match its signed SHA-256"), group: &group, at: t0)
        #expect(decision == .giveUp)
        #expect(
            Origin.error(fetching: "objects/x", request.failures.map { ("m\($0.mirror)", $0.failure) }).code
                == .refusedData)

        // One mirror, the file in parts (each one progress): the damaged copy is not fetched again and again.
        var single = MirrorGroup(mirrors: 1)
        var whole = RetryPolicy()
        let first = whole.start(single, now: t0)
        whole.progressed(&single)
        #expect(
            Self.fail(&whole, first, with: .damaged("does not match its signed SHA-256"), group: &single, at: t0)
                == .giveUp)
    }

    @Test("content that must exist is retried on a mirror that fails while another lacks it")
    func unexpectedAbsence() {
        var group = MirrorGroup(mirrors: 2)
        var request = RetryPolicy(absence: .unexpected)
        var decision = request.start(group, now: t0)
        decision = Self.fail(&request, decision, with: .httpStatus(503), group: &group, at: t0)
        #expect(decision == .attempt(mirror: 1, after: .zero))
        decision = Self.fail(&request, decision, with: .notFound, group: &group, at: t0)
        #expect(decision == .attempt(mirror: 0, after: RetryPolicy.backoff(2, random: 0.5)))
        decision = Self.fail(&request, decision, with: .httpStatus(503), group: &group, at: t0)
        #expect(
            decision == .attempt(mirror: 0, after: RetryPolicy.backoff(3, random: 0.5)),
            "the mirror that said 404 is not asked again")
    }

    @Test(
        "a mirror that lacks signed content (a 404 from one lagging behind) is asked last by later requests, without counting against the streak"
    )
    func laggingMirrorAskedLast() {
        var group = MirrorGroup(mirrors: 2)
        var request = RetryPolicy(absence: .unexpected)
        let decision = request.start(group, now: t0)
        #expect(
            Self.fail(&request, decision, with: .notFound, group: &group, at: t0) == .attempt(mirror: 1, after: .zero))
        #expect(group.streak == 0)
        var next = RetryPolicy(absence: .unexpected)
        #expect(next.start(group, now: t0 + .seconds(1)) == .attempt(mirror: 1, after: .zero))
        var probe = RetryPolicy(absence: .possible)
        let asked = probe.start(MirrorGroup(mirrors: 2), now: t0)
        var fresh = MirrorGroup(mirrors: 2)
        _ = Self.fail(&probe, asked, with: .notFound, group: &fresh, at: t0)
        #expect(fresh.order(now: t0) == [0, 1], "a 404 for a file that may not exist says nothing about the mirror")
    }

    @Test("a file that may be absent: a mirror's 404 is believed over one that cannot be reached")
    func possibleAbsence() {
        var group = MirrorGroup(mirrors: 2)
        var request = RetryPolicy(absence: .possible)
        var decision = request.start(group, now: t0)
        decision = Self.fail(&request, decision, with: .network("Connection refused"), group: &group, at: t0)
        #expect(decision == .attempt(mirror: 1, after: .zero))
        #expect(Self.fail(&request, decision, with: .notFound, group: &group, at: t0) == .giveUp)
        #expect(Origin.allAbsent(request.failures.map { ("m\($0.mirror)", $0.failure) }))

        var later = RetryPolicy(absence: .possible)  // the unreachable mirror is cooling: not asked for a probe
        decision = later.start(group, now: t0 + .seconds(1))
        #expect(decision == .attempt(mirror: 1, after: .zero))
        #expect(Self.fail(&later, decision, with: .notFound, group: &group, at: t0 + .seconds(1)) == .giveUp)
    }

    static let answers: [([TransferFailure], Bool)] = [
        ([.network("refused"), .notFound], true),
        ([.httpStatus(503), .notFound], true),
        ([.notFound, .notFound], true),
        ([.network("refused")], false),
        ([.httpStatus(503)], false),
        ([.tooLarge(10), .notFound], false),
        ([.httpStatus(400), .notFound], false)
    ]

    @Test("a whole file is absent (nil) only when the mirrors that answered all said not found", arguments: answers)
    func absentWhenAnswered(failures: [TransferFailure], absent: Bool) {
        #expect(Origin.allAbsent(failures.enumerated().map { ("m\($0.offset)", $0.element) }) == absent)
    }

    @Test("a mirror that failed is asked last for 60 s, then first again; with one mirror retries stay on it")
    func coolDownAndFailBack() {
        var group = MirrorGroup(mirrors: 2)
        var request = RetryPolicy()
        var decision = request.start(group, now: t0)
        decision = Self.fail(&request, decision, with: .network("timed out"), group: &group, at: t0)
        #expect(decision == .attempt(mirror: 1, after: .zero), "the healthy mirror, at once")
        #expect(group.order(now: t0 + .seconds(59)) == [1, 0])
        var next = RetryPolicy()
        #expect(next.start(group, now: t0 + .seconds(30)) == .attempt(mirror: 1, after: .zero))
        #expect(group.order(now: t0 + .seconds(61)) == [0, 1], "fail-back after the cool-down")
        var afterwards = RetryPolicy()
        #expect(afterwards.start(group, now: t0 + .seconds(61)) == .attempt(mirror: 0, after: .zero))

        decision = Self.fail(&request, decision, with: .httpStatus(502), group: &group, at: t0 + .seconds(1))
        #expect(
            decision == .attempt(mirror: 0, after: RetryPolicy.backoff(2, random: 0.5)),
            "both cooling: the first configured, after backoff")

        var single = MirrorGroup(mirrors: 1)
        var alone = RetryPolicy()
        let first = alone.start(single, now: t0)
        #expect(
            Self.fail(&alone, first, with: .network("reset"), group: &single, at: t0, random: 0.25)
                == .attempt(mirror: 0, after: RetryPolicy.backoff(1, random: 0.25)))
    }

    @Test("a preferred mirror is asked first unless it is cooling down")
    func preferred() {
        var group = MirrorGroup(mirrors: 3)
        #expect(group.order(now: t0, preferring: 1) == [1, 2, 0])
        group.failed(mirror: 1, now: t0)
        #expect(group.order(now: t0, preferring: 1) == [2, 0, 1])
    }

    @Test("no attempt starts after the deadline")
    func deadline() {
        var group = MirrorGroup(mirrors: 1)
        var request = RetryPolicy(deadline: t0 + .seconds(2))
        let first = request.start(group, now: t0)
        #expect(first == .attempt(mirror: 0, after: .zero))
        #expect(
            Self.fail(&request, first, with: .httpStatus(503, retryAfter: .seconds(5)), group: &group, at: t0)
                == .giveUp,
            "the wait would end after the deadline")
        var late = RetryPolicy(deadline: t0 + .seconds(2))
        #expect(late.start(group, now: t0 + .seconds(2)) == .giveUp)
        var timely = RetryPolicy(deadline: t0 + .seconds(2))
        let go = timely.start(group, now: t0)
        #expect(Self.fail(&timely, go, with: .network("reset"), group: &group, at: t0 + .seconds(1)) != .giveUp)
    }

    @Test("the backoff: full jitter up to 0.2 s × 2^(n-1), at most 5 s")
    func backoff() {
        #expect(RetryPolicy.backoff(1, random: 0) == .zero)
        #expect(RetryPolicy.backoff(1, random: 0.5) == .milliseconds(100))
        #expect(RetryPolicy.backoff(3, random: 0.5) == .milliseconds(400))
        #expect(RetryPolicy.backoff(6, random: 0.5) == .milliseconds(2500))
        #expect(RetryPolicy.backoff(100, random: 0.999) <= .seconds(5))
    }

    static let retryAfterValues: [(String, Duration?)] = [
        ("120", .seconds(120)),
        (" 5 \r\n", .seconds(5)),
        ("0", .zero),
        ("99999999999999999999999", .seconds(86_400)),
        ("Sun, 06 Nov 1994 08:49:37 GMT", .seconds(10)),
        ("Sunday, 06-Nov-94 08:49:37 GMT", .seconds(10)),
        ("Sun Nov  6 08:49:37 1994", .seconds(10)),
        ("Sat, 05 Nov 1994 08:49:37 GMT", .zero),
        ("soon", nil),
        ("-1", nil),
        ("1.5", nil),
        ("", nil)
    ]

    @Test("Retry-After: seconds and the three HTTP-date forms, from now; junk is ignored", arguments: retryAfterValues)
    func parseRetryAfter(value: String, expected: Duration?) {
        let now = Date(timeIntervalSince1970: 784_111_777 - 10)  // ten seconds before Sun, 06 Nov 1994 08:49:37 GMT
        #expect(TransferBox.parseRetryAfter(value, now: now) == expected)
    }
}

@Suite("Retry-After over HTTP", .tags(.medium))
struct RetryAfterHeaderTests {
    @Test("a 503's Retry-After header reaches the retry policy with the failure")
    func headerCaptured() async throws {
        let fixture = try Fixture.published()
        let origin = try FaultOrigin(root: fixture.origin, fault: .unavailable, prefix: "/metadata/", retryAfter: "7")
        let client = try HTTPClient()
        let result = await client.fetchData(url: origin.url + "/metadata/timestamp.json", maxBytes: 16_384)
        guard case .failure(let failure) = result else {
            Issue.record("the 503 was not a failure: \(result)")
            return
        }
        #expect(failure.retryAfter == .seconds(7))
        #expect(failure.isRetryable && failure.description == "HTTP status 503")
    }
}

/// SplitMix64: a small seeded generator, so a random sequence of failures is the same on every run.
private struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func unit() -> Double { Double(next() >> 11) / Double(UInt64(1) << 53) }
}
