import Testing

@testable import PatchSync

/// The one token bucket behind a client's bandwidth cap and a share's send budget, on instants the
/// test gives.
@Suite("Token bucket", .tags(.small))
struct TokenBucketTests {
    static let start = ContinuousClock.now

    @Test("a bucket starts full, earns its rate up to its capacity, and a take past it leaves a debt the rate repays")
    func earnsAndRepays() {
        var bucket = TokenBucket(rate: 1000, capacity: 100, at: Self.start)
        #expect(bucket.tokens == 100)
        bucket.take(600)
        #expect(bucket.debt == 500)
        #expect(bucket.timeToRepay == .milliseconds(500))
        bucket.refill(at: Self.start + .milliseconds(250))
        #expect(bucket.debt == 250)
        bucket.refill(at: Self.start + .milliseconds(100))  // an instant before the last one earns nothing
        #expect(bucket.debt == 250)
        bucket.refill(at: Self.start + .seconds(60))  // an idle spell earns no more than the capacity
        #expect(bucket.tokens == 100 && bucket.debt == 0 && bucket.timeToRepay == .zero)
    }

    @Test("a new rate keeps what the bucket holds down to the new capacity; a floor forgives a debt")
    func newRate() {
        var bucket = TokenBucket(rate: 1000, capacity: 100, at: Self.start)
        bucket.set(rate: 10, capacity: 40)
        #expect(bucket.tokens == 40 && bucket.rate == 10)
        bucket.take(140)
        #expect(bucket.timeToRepay == .seconds(10))
        bucket.set(rate: 10, capacity: 40, atLeast: 1)
        #expect(bucket.tokens == 1)
    }

    @Test("a take may be held to a most debt; a debt already past it stays as it is")
    func boundedDebt() {
        var bucket = TokenBucket(rate: 1000, capacity: 0, at: Self.start)
        bucket.take(300, owingAtMost: 200)
        #expect(bucket.debt == 200)
        bucket.take(500)  // a plain take may pass it
        #expect(bucket.debt == 700)
        bucket.take(300, owingAtMost: 200)
        #expect(bucket.debt == 700)
    }
}
