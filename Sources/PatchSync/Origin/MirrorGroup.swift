import Foundation

/// What the requests of one sync share about the mirrors: the streak of failures with no progress
/// between them, and each mirror's cool-down. A value type with the time passed in; ``Origin`` keeps
/// one under its lock and ``RetryPolicy`` reads and updates it.
///
/// The streak is the sync's retry budget: any request that delivers bytes resets it, so an origin
/// that fails a share of its requests but keeps delivering is never given up on, while one that
/// delivers nothing is, after ``failureStreak`` failures whichever requests they hit.
struct MirrorGroup: Sendable {
    /// Failures in a row before giving up: above the connections a sync runs at once (6 by default),
    /// so one fault on each request in flight is survived.
    static let defaultFailureStreak = 8
    /// A mirror that failed retryably is asked last for this long, then first again (fail-back).
    static let coolDown: Duration = .seconds(60)

    let mirrorCount: Int
    /// Retryable failures in a row, with no byte of progress between them, after which requests give up.
    let failureStreak: Int
    private(set) var streak = 0
    private var coolingUntil: [Int: ContinuousClock.Instant] = [:]
    /// Each mirror's last failure in this sync, so that a request that gives up without asking a
    /// cooling mirror can still say what that mirror did.
    private(set) var lastFailure: [Int: TransferFailure] = [:]

    init(mirrors: Int, failureStreak: Int = Self.defaultFailureStreak) {
        mirrorCount = max(1, mirrors)
        self.failureStreak = max(1, failureStreak)
    }

    /// Whether the streak is spent: the origin delivered nothing for ``failureStreak`` failures.
    var isExhausted: Bool { streak >= failureStreak }

    /// Whether `mirror` failed retryably less than ``coolDown`` before `now`.
    func isCooling(_ mirror: Int, now: ContinuousClock.Instant) -> Bool {
        coolingUntil[mirror].map { now < $0 } ?? false
    }

    /// Mirror indices in the order to ask them: those not cooling down in configured order, then the
    /// cooling ones; starting from `preferred` (and going round) when given.
    func order(now: ContinuousClock.Instant, preferring preferred: Int? = nil) -> [Int] {
        let first = preferred.map { min(max(0, $0), mirrorCount - 1) } ?? 0
        let rotated = Array(first..<mirrorCount) + Array(0..<first)
        return rotated.filter { !isCooling($0, now: now) } + rotated.filter { isCooling($0, now: now) }
    }

    /// Bytes arrived and were kept: the streak starts over.
    mutating func progressed() { streak = 0 }

    /// `mirror` failed retryably at `now`: it cools down, and the failure counts in the streak unless
    /// the same response delivered bytes first.
    mutating func failed(
        mirror: Int, now: ContinuousClock.Instant, countsInStreak: Bool = true,
        with failure: TransferFailure? = nil
    ) {
        if countsInStreak { streak += 1 }
        coolingUntil[mirror] = now + Self.coolDown
        if let failure { lastFailure[mirror] = failure }
    }
}
