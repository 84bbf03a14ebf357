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
}
