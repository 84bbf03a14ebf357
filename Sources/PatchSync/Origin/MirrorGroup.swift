import Foundation

/// What the requests of one sync share about the mirrors: the streak of failures with no progress
/// between them, how long they have failed, which mirrors could not be reached, and each mirror's
/// cool-down. A value type with the time passed in; ``Origin`` keeps one under its lock and
/// ``RetryPolicy`` reads and updates it.
///
/// The streak is the sync's retry budget: any request that delivers bytes resets it, so an origin
/// that fails a share of its requests but keeps delivering is never given up on, while one that
/// answers with failures and delivers nothing is, after ``failureStreak`` failures whichever requests
/// they hit. A mirror that cannot be reached at all (``TransferFailure/unreachable(_:)``) spends time,
/// not the budget: a refused connection fails at once, and a network blink (a restarted server, a Wi-Fi
/// handover, a resume from suspend) would spend any streak in seconds. Requests wait for it, backing
/// off up to ``RetryPolicy/cap`` between tries, until ``giveUpAfter`` with no progress.
struct MirrorGroup: Sendable {
    /// Failures in a row before giving up: above the connections a sync runs at once (6 by default),
    /// so one fault on each request in flight is survived.
    static let defaultFailureStreak = 8
    /// A mirror that failed retryably is asked last for this long, then first again (fail-back).
    static let coolDown: Duration = .seconds(60)
    /// How long with no byte arriving before a request, or a sync, gives up when it is not told: about
    /// what a launcher's player waits through (a router's restart, a Wi-Fi handover, a resume).
    static let defaultGiveUp: Duration = .seconds(120)

    let mirrorCount: Int
    /// Failures in a row where a mirror was reached, with no byte of progress between them, after which
    /// requests give up.
    let failureStreak: Int
    /// No attempt starts this long after the first failure since the last progress; nil: none is
    /// refused for the time (a sync's watch gives up instead, timing the quiet by the byte).
    let giveUpAfter: Duration?
    /// Retryable failures in a row with no progress between them, of every kind: the backoff grows with it.
    private(set) var streak = 0
    /// Those of ``streak`` where a mirror was reached (it answered 5xx, cut a response short): the budget.
    private(set) var spent = 0
    /// When the first failure since the last progress came (nil: none since).
    private(set) var failingSince: ContinuousClock.Instant?
    /// The mirrors that could not be reached at their last try since the last progress.
    private var unreachable: Set<Int> = []
    private var coolingUntil: [Int: ContinuousClock.Instant] = [:]
    /// Each mirror's last failure in this sync, so that a request that gives up without asking a
    /// cooling mirror can still say what that mirror did.
    private(set) var lastFailure: [Int: TransferFailure] = [:]

    init(mirrors: Int, failureStreak: Int = Self.defaultFailureStreak, giveUpAfter: Duration? = nil) {
        mirrorCount = max(1, mirrors)
        self.failureStreak = max(1, failureStreak)
        self.giveUpAfter = giveUpAfter
    }

    /// Whether the streak is spent: the mirrors answered with ``failureStreak`` failures and delivered nothing.
    var isExhausted: Bool { spent >= failureStreak }

    /// Whether no mirror could be reached at its last try since the last progress: the origin is offline.
    var isOffline: Bool { unreachable.count == mirrorCount }

    /// Whether an attempt starting at `instant` comes too late: ``giveUpAfter`` after the first failure
    /// since the last progress.
    func outlasts(_ instant: ContinuousClock.Instant) -> Bool {
        guard let giveUpAfter, let failingSince else { return false }
        return instant - failingSince >= giveUpAfter
    }

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

    /// Bytes arrived and were kept: the streak, the budget and the time failing start over.
    mutating func progressed() {
        streak = 0
        spent = 0
        failingSince = nil
        unreachable = []
    }

    /// `mirror` failed retryably at `now`: it cools down, and the failure counts in the streak unless
    /// the same response delivered bytes first (and in the budget unless the mirror could not be reached).
    mutating func failed(
        mirror: Int, now: ContinuousClock.Instant, countsInStreak: Bool = true,
        with failure: TransferFailure? = nil
    ) {
        let unreached = failure?.isUnreachable ?? false
        if countsInStreak {
            streak += 1
            if !unreached { spent += 1 }
        }
        if failingSince == nil { failingSince = now }
        if unreached { unreachable.insert(mirror) } else { unreachable.remove(mirror) }
        coolingUntil[mirror] = now + Self.coolDown
        if let failure { lastFailure[mirror] = failure }
    }
}
