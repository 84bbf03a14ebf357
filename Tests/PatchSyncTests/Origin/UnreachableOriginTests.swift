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
    static let refused = TransferFailure.unreachable(
        "Failed to connect to 127.0.0.1 port 1 after 0 ms: Connection refused")

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
            decision = request.next(
                after: refused, on: mirror, progressed: false, group: &group, now: now, random: 0.999)
        }
        return (decision, waits, now)
    }

    @Test(
        "an origin whose every mirror refuses connections is asked again, at most 5 s apart, past any failure streak, until the give-up time has passed with no progress; then the request ends naming each mirror's refusal"
    )
    func refusedUntilGiveUp() {
        var group = MirrorGroup(mirrors: 2, giveUpAfter: .seconds(60))
        var request = RetryPolicy()
        let (decision, waits, now) = Self.refuseAll(&request, group: &group, from: t0)
        #expect(decision == .giveUp)
        #expect(
            waits.count > MirrorGroup.defaultFailureStreak,
            "\(waits.count) tries: a streak of refusals spends no budget")
        #expect(waits.allSatisfy { $0 <= .seconds(5) }, "\(waits)")
        #expect(now - t0 >= .seconds(55) && now - t0 < .seconds(60), "gave up after \(now - t0), at the give-up time")
        #expect(Set(request.failures.map { $0.mirror }) == [0, 1])
        #expect(request.failures.allSatisfy { $0.failure.isUnreachable })
        #expect(!group.isExhausted && group.isOffline)
    }

    @Test(
        "with no give-up time of its own (a sync: its watch times the quiet by the byte), a refused origin is asked again at most 5 s apart for as long as it takes"
    )
    func refusedWhileTheWatchWaits() {
        var group = MirrorGroup(mirrors: 1)
        var request = RetryPolicy()
        let (decision, waits, _) = Self.refuseAll(&request, group: &group, from: t0, until: .seconds(3600))
        #expect(decision != .giveUp)
        #expect(waits.count > 600 && waits.allSatisfy { $0 <= .seconds(5) }, "\(waits.count) tries in an hour")
    }

    @Test(
        "the give-up time counts from the last progress, not from the first request: an origin that delivers between blinks of 40 s is never given up on"
    )
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
        for _ in 0..<20 {
            decision = RetryPolicyTests.fail(&request, decision, with: Self.refused, group: &group, at: t0)
        }
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

    @Test(
        "a connect that times out (its SYN dropped, as on a Wi-Fi blink or to a blackholed address) is an unreachable mirror too, not a failure that spends the streak",
        .tags(.medium))
    func connectTimeoutIsUnreachable() async throws {
        let (port, sockets) = try Self.droppingPort()
        defer { for fd in sockets { close(fd) } }
        var settings = HTTPClient.Settings()
        settings.connectTimeoutSeconds = 1
        let client = try HTTPClient(settings: settings)
        // The whole request within 5 s: were the connection made after all, it would end as a network failure.
        let result = await client.fetchData(
            url: "http://127.0.0.1:\(port)/metadata/timestamp.json", maxBytes: 1024, timeout: 5)
        guard case .failure(let failure) = result else {
            Issue.record("a port that drops every SYN answered: \(result)")
            return
        }
        #expect(failure.isUnreachable && failure.isRetryable, "\(failure)")
    }

    /// A loopback port whose listener never accepts and whose queue of connections is full: the kernel
    /// drops every further SYN, so a connect to it times out, as one to a blackholed address does (no
    /// refusal comes). Fillers connect until one does not within 0.2 s. Returns the port and the sockets
    /// to close.
    static func droppingPort() throws -> (port: Int, sockets: [Int32]) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var sockets = [listener]
        let listening = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                var size = length
                return bind(listener, address, length) == 0 && listen(listener, 1) == 0
                    && getsockname(listener, address, &size) == 0
            }
        }
        guard listener >= 0, listening else {
            let code = errno
            for fd in sockets { close(fd) }
            throw PatchSyncError(.internal, "cannot listen on 127.0.0.1: \(String(cString: strerror(code)))")
        }
        for _ in 0..<16 {
            let filler = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            sockets.append(filler)
            var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
            setsockopt(filler, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(filler, $0, length) == 0 }
            }
            if !connected { return (Int(UInt16(bigEndian: address.sin_port)), sockets) }
        }
        for fd in sockets { close(fd) }
        throw PatchSyncError(.internal, "16 connections to a listener that never accepts all completed")
    }
}
