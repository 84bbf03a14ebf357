/// A token bucket: refilled at `rate` tokens a second up to `capacity`, from instants the caller
/// gives (so a test needs no clock). A take may overdraw it; the debt is repaid by the rate before the
/// bucket holds tokens again. The bandwidth cap of a client and a share's send budget are both one.
struct TokenBucket: Sendable {
    typealias Instant = ContinuousClock.Instant

    /// Tokens a second.
    private(set) var rate: Double
    /// The most the bucket holds.
    private(set) var capacity: Double
    /// Tokens that may be taken now; below zero, the debt of takes that overdrew it.
    private(set) var tokens: Double
    private var last: Instant

    /// A full bucket at `now`.
    init(rate: Double, capacity: Double, at now: Instant) {
        self.rate = max(rate, .leastNonzeroMagnitude)
        self.capacity = capacity
        tokens = capacity
        last = now
    }

    /// Adds what the rate earned since the last refill, up to the capacity (an instant before the last
    /// one adds nothing).
    mutating func refill(at now: Instant) { refill(at: now, holding: capacity) }

    /// ``refill(at:)`` up to `most` tokens instead of the capacity.
    mutating func refill(at now: Instant, holding most: Double) {
        guard now > last else { return }
        tokens = min(max(capacity, most), tokens + (now - last).inSeconds * rate)
        last = now
    }

    /// Takes `amount` tokens, into debt if need be.
    mutating func take(_ amount: Double) { tokens -= amount }

    /// What takes owe, in tokens (0 when the bucket holds some).
    var debt: Double { max(0, -tokens) }

    /// The time the rate takes to repay the debt (zero when there is none).
    var timeToRepay: Duration { .seconds(debt / rate) }

    /// A new rate and capacity; what the bucket holds is kept, down to the new capacity. `atLeast`: the
    /// fewest tokens it holds after (a debt is forgiven down to it).
    mutating func set(rate: Double, capacity: Double, atLeast floor: Double? = nil) {
        self.rate = max(rate, .leastNonzeroMagnitude)
        self.capacity = capacity
        tokens = min(tokens, capacity)
        if let floor { tokens = max(tokens, floor) }
    }

    /// Limits the debt to `limit` tokens (a debt already past it stays as it is) after taking `amount`.
    mutating func take(_ amount: Double, owingAtMost limit: Double) {
        tokens = max(min(tokens, -limit), tokens - amount)
    }
}
