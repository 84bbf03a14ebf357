import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// A network blink (a restarted server, a Wi-Fi handover, a resume from suspend) as the retry policy
/// sees it: connections refused at once, again and again. Stepped with a timeline of instants and a
/// fixed jitter: nothing sleeps.
@Suite("An origin that cannot be reached", .tags(.small))
struct UnreachableOriginTests {
    let t0 = ContinuousClock.now
    static let refused = TransferFailure.unreachable("Failed to connect to 127.0.0.1 port 1 after 0 ms: Connection refused")

    /// Refuses every attempt at once, moving the time by each wait, until the request gives up or `until`
    /// has passed; returns the waits and the time of the last decision.
    static func refuseAll(
        _ request: inout RetryPolicy, group: inout MirrorGroup, from start: ContinuousClock.Instant,
        until: Duration = .seconds(3600)
    ) -> (decision: RetryPolicy.Decision, waits: [Duration], now: ContinuousClock.Instant) {
        var now = start
        var decision = request.start(group, now: now)
        var waits: [Duration] = []
        while now - start < until, case .attempt(let mirror, let wait) = decision {
            now = now + wait
            waits.append(wait)
            decision = request.next(after: refused, on: mirror, progressed: false, group: &group, now: now, random: 0.999)
        }
        return (decision, waits, now)
    }

    @Test("an origin whose every mirror refuses connections is asked again, at most 5 s apart, past any failure streak, until the give-up time has passed with no progress; then the request ends naming each mirror's refusal")
    func refusedUntilGiveUp() {
        var group = MirrorGroup(mirrors: 2, giveUpAfter: .seconds(60))
        var request = RetryPolicy()
        let (decision, waits, now) = Self.refuseAll(&request, group: &group, from: t0)
        #expect(decision == .giveUp)
        #expect(waits.count > MirrorGroup.defaultFailureStreak, "\(waits.count) tries: a streak of refusals spends no budget")
        #expect(waits.allSatisfy { $0 <= .seconds(5) }, "\(waits)")
        #expect(now - t0 >= .seconds(55) && now - t0 < .seconds(60), "gave up after \(now - t0), at the give-up time")
        #expect(Set(request.failures.map { $0.mirror }) == [0, 1])
        #expect(request.failures.allSatisfy { $0.failure.isUnreachable })
        #expect(!group.isExhausted && group.isOffline)
    }

    @Test("with no give-up time of its own (a sync: its watch times the quiet by the byte), a refused origin is asked again at most 5 s apart for as long as it takes")
    func refusedWhileTheWatchWaits() {
        var group = MirrorGroup(mirrors: 1)
        var request = RetryPolicy()
        let (decision, waits, _) = Self.refuseAll(&request, group: &group, from: t0, until: .seconds(3600))
        #expect(decision != .giveUp)
        #expect(waits.count > 600 && waits.allSatisfy { $0 <= .seconds(5) }, "\(waits.count) tries in an hour")
    }

    @Test("the give-up time counts from the last progress, not from the first request: an origin that delivers between blinks of 40 s is never given up on")
    func giveUpCountsFromLastProgress() {
        var group = MirrorGroup(mirrors: 1, giveUpAfter: .seconds(60))
        var now = t0
        for blink in 0..<30 {  // 30 blinks with bytes between them: twenty minutes, far past the give-up time
            var request = RetryPolicy()
            let (decision, _, end) = Self.refuseAll(&request, group: &group, from: now, until: .seconds(40))
            #expect(decision != .giveUp, "blink \(blink), \(end - t0) into the sync")
            request.progressed(&group)  // the origin is back: bytes arrive
            now = end + .seconds(5)
        }
        #expect(now - t0 > .seconds(20 * 60))
    }

    @Test("a mirror that answers (503) still spends the failure streak after a blink: refusals make no answer endless")
    func answersSpendTheStreak() {
        var group = MirrorGroup(mirrors: 1)
        var request = RetryPolicy()
        var decision = request.start(group, now: t0)
        for _ in 0..<20 { decision = RetryPolicyTests.fail(&request, decision, with: Self.refused, group: &group, at: t0) }
        #expect(decision != .giveUp && !group.isExhausted)
        for failure in 1..<MirrorGroup.defaultFailureStreak {
            decision = RetryPolicyTests.fail(&request, decision, with: .httpStatus(503), group: &group, at: t0)
            #expect(decision != .giveUp, "503 number \(failure)")
        }
        #expect(RetryPolicyTests.fail(&request, decision, with: .httpStatus(503), group: &group, at: t0) == .giveUp)
    }

    @Test("the origin is offline only while every mirror refused at its last try, and no byte came since")
    func offlineWhenEveryMirrorRefuses() {
        var group = MirrorGroup(mirrors: 2)
        group.failed(mirror: 0, now: t0, with: Self.refused)
        #expect(!group.isOffline, "the second mirror was not asked yet")
        group.failed(mirror: 1, now: t0, with: Self.refused)
        #expect(group.isOffline)
        group.failed(mirror: 1, now: t0, with: .httpStatus(503))
        #expect(!group.isOffline, "a mirror answered")
        group.failed(mirror: 1, now: t0, with: Self.refused)
        group.progressed()
        #expect(!group.isOffline && group.failingSince == nil && group.streak == 0)
    }

    @Test("libcurl's refused connection is an unreachable mirror, not a failure that spends the streak")
    func refusedConnectionIsUnreachable() async throws {
        let client = try HTTPClient()
        let result = await client.fetchData(url: "http://127.0.0.1:1/metadata/timestamp.json", maxBytes: 1024)
        guard case .failure(let failure) = result else {
            Issue.record("a closed port answered: \(result)")
            return
        }
        #expect(failure.isUnreachable && failure.isRetryable, "\(failure)")
    }
}
