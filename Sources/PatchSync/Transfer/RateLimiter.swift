import Foundation
import Synchronization

/// One bandwidth budget shared by every transfer of a client: a token bucket refilled at
/// `bytesPerSecond`, holding at most a twentieth of a second's worth (at least 16 KiB).
/// libcurl's own cap (CURLOPT_MAX_RECV_SPEED_LARGE) is per transfer and would multiply by the
/// number of connections.
///
/// A write callback that finds the bucket empty pauses its transfer (the bytes stay with libcurl,
/// the socket stops being read, TCP slows the sender); the transfer thread resumes paused
/// transfers once tokens are back. Bytes taken may overdraw the bucket by one callback's worth;
/// the debt is repaid before anyone continues, so the average rate holds.
///
/// With a ``DelayController`` the rate follows request latency below the cap (discretionary syncs
/// yield to other traffic).
///
/// Thread-safety: a `Mutex` holds the bucket, the controller and the paused transfers. The transfer
/// thread takes it, and others only to read ``publishedRate`` and ``hasPaused`` (the sync's stall
/// watch, ten times a second), so it is hardly contended.
final class RateLimiter: Sendable {
    private struct State {
        var bucket: TokenBucket
        var controller: DelayController?
        /// Bytes taken since `windowStart`, and the rate they came at over the last window: how fast
        /// the link actually delivers (the controller's rate may not run ahead of it).
        var windowBytes = 0.0
        var windowStart = ContinuousClock.now
        var achieved: Double?
        /// Transfers paused for want of tokens, to resume once there are some.
        var paused: [TransferBox] = []

        /// A new rate, the bucket's size following it; `atLeast`: the fewest tokens it keeps.
        mutating func set(rate: Double, atLeast floor: Double? = nil) {
            bucket.set(rate: rate, capacity: RateLimiter.capacity(at: rate), atLeast: floor)
        }
    }

    private let started = ContinuousClock.now
    private let state: Mutex<State>

    /// `bytesPerSecond` nil: no cap until ``setCap(_:)`` sets one.
    init(bytesPerSecond: Int?, yielding: Bool = false) {
        let cap = bytesPerSecond.map { Double(max(1, $0)) } ?? Self.unlimited
        let controller = yielding && bytesPerSecond != nil ? DelayController(ceiling: cap) : nil
        let rate = controller?.rate ?? cap
        let bucket = TokenBucket(rate: rate, capacity: Self.capacity(at: rate), at: .now)
        state = Mutex(State(bucket: bucket, controller: controller))
    }

    /// The rate of a limiter without a cap: tokens never run out.
    static let unlimited = 1e15

    /// A new cap (nil: none) for the transfers running and to come; a yielding limiter keeps yielding below it.
    func setCap(_ bytesPerSecond: Int?) {
        state.withLock { state in
            state.bucket.refill(at: .now)
            let cap = bytesPerSecond.map { Double(max(1, $0)) } ?? Self.unlimited
            state.controller = state.controller != nil && bytesPerSecond != nil ? DelayController(ceiling: cap) : nil
            // A debt is forgiven: the new cap starts now.
            state.set(rate: state.controller?.rate ?? cap, atLeast: 1)
        }
    }

    /// The current rate, for other threads.
    var publishedRate: Double { state.withLock { $0.bucket.rate } }

    /// The bucket's size at `rate`: a twentieth of a second's worth, at least 16 KiB.
    private static func capacity(at rate: Double) -> Double { max(16 * 1024, rate / 20) }

    /// A request's time to first byte, for the delay controller (no-op without one).
    func observe(latency seconds: Double) {
        state.withLock { state in
            guard var controller = state.controller else { return }
            let now = ContinuousClock.now
            state.bucket.refill(at: now)
            let window = (now - state.windowStart).inSeconds
            if window >= 0.5 {
                state.achieved = state.windowBytes / window
                state.windowBytes = 0
                state.windowStart = now
            }
            let rate = controller.observe(delay: seconds, at: (now - started).inSeconds, achieved: state.achieved)
            state.controller = controller
            state.set(rate: rate)
        }
    }

    /// Adds the tokens earned since the last refill.
    func refill(now: ContinuousClock.Instant = .now) {
        state.withLock { $0.bucket.refill(at: now) }
    }

    /// Whether a transfer may take bytes now.
    var available: Bool { state.withLock { $0.bucket.tokens > 0 } }

    /// Charges `bytes` taken.
    func take(_ bytes: Int) {
        state.withLock { state in
            state.bucket.take(Double(bytes))
            state.windowBytes += Double(bytes)
        }
    }

    /// How long until the bucket holds tokens again, in milliseconds (at least 1).
    var millisecondsUntilAvailable: Int {
        state.withLock { state in
            state.bucket.tokens > 0 ? 0 : max(1, Int((state.bucket.timeToRepay.inSeconds * 1000).rounded(.up)))
        }
    }

    /// Whether transfers wait for tokens.
    var hasPaused: Bool { state.withLock { !$0.paused.isEmpty } }

    /// Parks a transfer that found the bucket empty, until ``resumable()`` hands it back.
    func pause(_ box: TransferBox) {
        state.withLock { $0.paused.append(box) }
    }

    /// Adds the tokens earned since the last refill while transfers wait for them. They waited for this
    /// budget, not for the link: what a late wake-up of the transfer thread (a busy machine) would lose above
    /// the bucket's size is kept, up to a quarter of a second's worth, so the cap is what a transfer gets.
    func refillWaiting(now: ContinuousClock.Instant = .now) {
        state.withLock { Self.refillWaiting(&$0.bucket, now: now) }
    }

    private static func refillWaiting(_ bucket: inout TokenBucket, now: ContinuousClock.Instant) {
        bucket.refill(at: now, holding: bucket.rate / 4)
    }

    /// Refills (``refillWaiting(now:)``), and once the bucket holds tokens again, hands back the paused
    /// transfers (forgetting them); none while it is still empty.
    func resumable() -> [TransferBox] {
        state.withLock { state -> [TransferBox] in
            guard !state.paused.isEmpty else { return [] }
            Self.refillWaiting(&state.bucket, now: .now)
            guard state.bucket.tokens > 0 else { return [] }
            defer { state.paused = [] }
            return state.paused
        }
    }

    /// Forgets a transfer that ended while paused.
    func forget(_ box: TransferBox) {
        state.withLock { state in state.paused.removeAll { $0 === box } }
    }
}
