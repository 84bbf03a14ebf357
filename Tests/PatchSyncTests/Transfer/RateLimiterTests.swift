import Foundation
import Testing

@testable import PatchSync

/// Issue 7, part 5: one bandwidth budget for all transfers (the token bucket's arithmetic).
@Suite("Bandwidth budget", .tags(.small))
struct RateLimiterTests {
    @Test(
        "the bucket earns bytesPerSecond, holds at most a twentieth of a second (at least 16 KiB), and debts are repaid"
    )
    func tokenBucket() {
        let limiter = RateLimiter(bytesPerSecond: 1 << 20)
        let start = ContinuousClock.now
        limiter.refill(now: start)
        #expect(limiter.available)
        limiter.take(256 << 10)  // one big callback overdraws the bucket
        #expect(!limiter.available)
        // 256 KiB − 52 KiB capacity = 204 KiB of debt at 1 MiB/s: about 200 ms.
        #expect((190...205).contains(limiter.millisecondsUntilAvailable), "\(limiter.millisecondsUntilAvailable)")
        limiter.refill(now: start + .milliseconds(100))
        #expect(!limiter.available)
        limiter.refill(now: start + .milliseconds(210))
        #expect(limiter.available)
        limiter.refill(now: start + .seconds(10))  // an idle spell earns no more than the capacity
        limiter.take((1 << 20) / 20 + 1)
        #expect(!limiter.available)
        let small = RateLimiter(bytesPerSecond: 1000)
        small.take(16 * 1024)
        #expect(!small.available, "a 16 KiB bucket is empty after 16 KiB")
    }

    @Test(
        "transfers waiting for tokens keep what a late wake-up would lose (up to a quarter second's worth): a busy machine still gets the cap"
    )
    func lateWakeUpKeepsTheRate() {
        let start = ContinuousClock.now
        let waiting = RateLimiter(bytesPerSecond: 1 << 20), plain = RateLimiter(bytesPerSecond: 1 << 20)
        for limiter in [waiting, plain] {
            limiter.refill(now: start)
            limiter.take(256 << 10)  // about 200 ms of debt
        }
        // The transfer thread wakes 200 ms after the debt is repaid.
        waiting.refillWaiting(now: start + .milliseconds(400))
        plain.refill(now: start + .milliseconds(400))
        for limiter in [waiting, plain] { limiter.take(150 << 10) }
        #expect(waiting.available, "the 200 ms the thread overslept are still there to take")
        #expect(!plain.available, "a plain refill keeps a twentieth of a second")
        // Idle or waiting, no more than a quarter second's worth is ever kept.
        waiting.refillWaiting(now: start + .seconds(60))
        waiting.take((1 << 20) / 4 + 1)
        #expect(!waiting.available)
    }
}
