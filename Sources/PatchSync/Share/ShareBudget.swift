import Foundation

/// What a share may send, all its connections together: a token bucket refilled at the share's rate,
/// decided from instants the caller gives, so tests need no clock.
///
/// Every answer costs ``perRequest`` (a 404, a 503, a HEAD too: a flood of requests is held to the rate
/// like a flood of bytes), a chunk its bytes besides. An answer may overdraw the bucket, and the next
/// ones wait until the debt is repaid, but only as long as ``maxWait``: past that they are answered
/// 503 with Retry-After at once, so no connection sleeps holding its slot and the debt never grows
/// past ``maxDebt`` of the rate (or one chunk, when a chunk is more), however many connections ask.
/// Over any span, the bytes sent are at most the rate's, plus the bucket (a tenth of a second) and that
/// debt.
struct ShareBudget: Sendable {
    typealias Instant = ContinuousClock.Instant

    /// What any answer costs, besides its body: the work of a request, in bytes of the rate.
    static let perRequest = 1024
    /// The longest an answer waits for the bucket; a longer wait is answered 503.
    static let maxWait = Duration.milliseconds(250)
    /// The most debt answers may leave, in time at the rate (one chunk may leave more, when the bucket
    /// owed nothing before it).
    static let maxDebt = Duration.seconds(1)

    /// What becomes of one answer.
    enum Grant: Sendable, Equatable {
        /// Send it after this wait (zero: now); its cost is taken.
        case send(after: Duration)
        /// Answer 503 with Retry-After: this many seconds (the time the debt takes to repay).
        case refuse(retryAfter: Int)
    }

    /// The rate's bucket, a tenth of a second deep; below zero, the debt of the answers sent.
    private var bucket: TokenBucket

    init(bytesPerSecond: Int, at now: Instant) {
        let rate = Double(max(1, bytesPerSecond))
        bucket = TokenBucket(rate: rate, capacity: rate / 10, at: now)
    }

    var bytesPerSecond: Double { bucket.rate }
    /// Bytes that may go now; below zero, the debt of the answers sent.
    var tokens: Double { bucket.tokens }
    /// The bucket's size: a tenth of a second at the rate.
    var burst: Double { bucket.capacity }

    /// The debt answers may leave, in bytes.
    private var debtLimit: Double { bytesPerSecond * Self.maxDebt.inSeconds }

    /// An answer with a body of `bytes` (0 for none) at `now`: sent after a wait of at most ``maxWait``,
    /// or refused when the debt is too large to wait for, or would pass ``maxDebt``.
    mutating func take(_ bytes: Int, at now: Instant) -> Grant {
        bucket.refill(at: now)
        let debt = bucket.debt
        let cost = Double(bytes + Self.perRequest)
        let wait = bucket.timeToRepay
        guard wait <= Self.maxWait, debt == 0 || debt + cost <= debtLimit else {
            charge(0, at: now)
            return .refuse(retryAfter: max(1, Int(bucket.timeToRepay.inSeconds.rounded(.up))))
        }
        bucket.take(cost)
        return .send(after: wait)
    }

    /// An answer with a body of `bytes` that neither waits nor is refused (a refusal, a 503): its cost
    /// is taken, as far as ``maxDebt`` (a debt already past it stays as it is).
    mutating func charge(_ bytes: Int, at now: Instant) {
        bucket.refill(at: now)
        bucket.take(Double(bytes + Self.perRequest), owingAtMost: debtLimit)
    }
}
