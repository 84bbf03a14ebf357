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
/// Thread-safety: used only on the transfer thread, except `publishedRate` (a Mutex).
final class RateLimiter: @unchecked Sendable {
    private(set) var bytesPerSecond: Double
    private var capacity: Double { Self.capacity(at: bytesPerSecond) }
    private var tokens: Double
    private var last = ContinuousClock.now
    private var controller: DelayController?
    private let started = ContinuousClock.now
    /// Bytes taken since `windowStart`, and the rate they came at over the last window: how fast
    /// the link actually delivers (the controller's rate may not run ahead of it).
    private var windowBytes = 0.0
    private var windowStart = ContinuousClock.now
    private var achieved: Double?
    private let shared: Mutex<Double>
    /// Transfers paused for want of tokens, to resume once there are some.
    var paused: [TransferBox] = []

    init(bytesPerSecond: Int, yielding: Bool = false) {
        let cap = Double(max(1, bytesPerSecond))
        controller = yielding ? DelayController(ceiling: cap) : nil
        self.bytesPerSecond = controller?.rate ?? cap
        tokens = Self.capacity(at: self.bytesPerSecond)
        shared = Mutex(self.bytesPerSecond)
    }

    /// The current rate, for other threads.
    var publishedRate: Double { shared.withLock { $0 } }

    /// The bucket's size at `rate`: a twentieth of a second's worth, at least 16 KiB.
    private static func capacity(at rate: Double) -> Double { max(16 * 1024, rate / 20) }

    /// A request's time to first byte, for the delay controller (no-op without one).
    func observe(latency seconds: Double) {
        guard var controller else { return }
        refill()
        let now = ContinuousClock.now
        let window = (now - windowStart) / .seconds(1)
        if window >= 0.5 {
            achieved = windowBytes / window
            windowBytes = 0
            windowStart = now
        }
        let rate = controller.observe(delay: seconds, at: (now - started) / .seconds(1), achieved: achieved)
        self.controller = controller
        bytesPerSecond = rate
        tokens = min(tokens, capacity)
        shared.withLock { $0 = rate }
    }

    /// Adds the tokens earned since the last refill.
    func refill(now: ContinuousClock.Instant = .now) {
        let elapsed = now - last
        last = now
        tokens = min(capacity, tokens + elapsed / .seconds(1) * bytesPerSecond)
    }

    /// Whether a transfer may take bytes now.
    var available: Bool { tokens > 0 }

    /// Charges `bytes` taken.
    func take(_ bytes: Int) {
        tokens -= Double(bytes)
        windowBytes += Double(bytes)
    }

    /// How long until the bucket holds tokens again, in milliseconds (at least 1).
    var millisecondsUntilAvailable: Int {
        tokens > 0 ? 0 : max(1, Int((-tokens / bytesPerSecond * 1000).rounded(.up)))
    }
}
