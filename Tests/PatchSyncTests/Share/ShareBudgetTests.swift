import Testing

@testable import PatchSync

/// What a share may send, driven by instants the tests choose: no socket, no waiting.
@Suite("LAN shares: the rate a share sends at", .tags(.small))
struct ShareBudgetTests {
    typealias Instant = ContinuousClock.Instant

    static let start = ContinuousClock.now
    static let rate = 1 << 20
    static let chunk = 256 << 10

    @Test(
        "64 connections asking for chunk after chunk for 10 s, each asking again when its answer was sent or, after a 503, about when Retry-After says: the share sends near its rate and never more than the rate, its bucket and a second's debt; no answer waits more than 0.25 s, the rest are 503 with Retry-After"
    )
    func floodHeldToTheRate() {
        var budget = ShareBudget(bytesPerSecond: Self.rate, at: Self.start)
        // When each connection asks next.
        var next = [Instant](repeating: Self.start, count: 64)
        var (sent, refused, longestWait) = (0, 0, Duration.zero)
        let end = Self.start + .seconds(10)
        while let now = next.min(), now < end {
            let client = next.firstIndex(of: now) ?? 0
            switch budget.take(Self.chunk, at: now) {
            case .send(let wait):
                sent += Self.chunk
                longestWait = max(longestWait, wait)
                next[client] = now + wait + .milliseconds(5)
            case .refuse(let retryAfter):
                refused += 1
                #expect(retryAfter >= 1)
                // Between half and one and a half times the wait asked: clients are not in step.
                next[client] = now + .seconds(Double(retryAfter) * (0.5 + Double((client * 37 + refused) % 100) / 100))
            }
        }
        let most = Double(Self.rate) * 10 + budget.burst + Double(Self.rate) * 1 + Double(Self.chunk)
        #expect(Double(sent) <= most, "\(sent) bytes in 10 s at \(Self.rate) B/s")
        #expect(Double(sent) >= 0.8 * Double(Self.rate) * 10, "the share still sends at about its rate: \(sent) bytes")
        #expect(longestWait <= ShareBudget.maxWait, "\(longestWait)")
        #expect(refused > 64, "\(refused) answers 503")
    }

    @Test(
        "every answer costs the share: a flood of requests for chunks it lacks (404, no body) is refused past the bucket and a quarter second's debt, like a flood of bytes"
    )
    func requestsCostToo() {
        var budget = ShareBudget(bytesPerSecond: Self.rate, at: Self.start)
        let grants = (0..<10_000).map { _ in budget.take(0, at: Self.start) }
        let answered = grants.filter { if case .send = $0 { return true } else { return false } }.count
        let most = (budget.burst + Double(Self.rate) / 4) / Double(ShareBudget.perRequest) + 1
        #expect(answered > 0 && Double(answered) <= most, "\(answered) of 10000 answered at once")
        // Refusals cost too, and still the debt stays within a second of the rate: a second later it is paid.
        for _ in 0..<10_000 { budget.charge(0, at: Self.start) }
        #expect(budget.tokens >= -Double(Self.rate))
        #expect(budget.take(0, at: Self.start + .milliseconds(1100)) == .send(after: .zero))
    }

    @Test(
        "a chunk bigger than a second of the rate is still sent when the share owes nothing (a low --share-rate never refuses every chunk), and the next one is refused for as long as that chunk takes at the rate"
    )
    func bigChunkAtALowRate() {
        var budget = ShareBudget(bytesPerSecond: 4096, at: Self.start)
        #expect(budget.take(Self.chunk, at: Self.start) == .send(after: .zero))
        guard case .refuse(let retryAfter) = budget.take(Self.chunk, at: Self.start) else {
            Issue.record("a second chunk went at once")
            return
        }
        #expect(retryAfter >= 60 && retryAfter <= 70, "\(retryAfter) s: 257 KiB at 4 KiB/s")
        #expect(budget.take(Self.chunk, at: Self.start + .seconds(retryAfter)) == .send(after: .zero))
    }
}
