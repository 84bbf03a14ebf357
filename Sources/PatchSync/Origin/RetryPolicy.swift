import Foundation

/// One request's way through the mirrors: after each failed attempt, which mirror to ask next and
/// after how long, or that the request is over. A value type driven with the time and the jitter
/// passed in, so tests step it without sleeping; ``Origin/withRetries(_:absence:deadline:preferring:onGiveUp:_:)``
/// does the waiting, and keeps the state all requests of a sync share (``MirrorGroup``) under its lock.
///
/// The budget follows progress: a request is not given up for how often it alone failed. It ends when
/// the sync's failures in a row with no progress between them reach the group's limit, when every
/// mirror answered that it lacks the file (a non-retryable answer) or served a damaged copy of it, or
/// when the next attempt would start after the deadline or the group's give-up time. A mirror that
/// cannot be reached (``TransferFailure/unreachable(_:)``) spends no budget: it is asked again, backing
/// off up to ``cap``, until bytes come or the give-up time. A retryable failure is retried at once on
/// another mirror that is not cooling down, else after exponential backoff with full jitter on the first
/// mirror in the group's order; a Retry-After from that mirror is honoured, up to ``maxRetryAfter``.
/// The backoff grows with the request's failures in a row or the sync's streak, whichever is longer, so
/// when every request in flight fails at once (a network outage) the last failures of the streak come
/// seconds later, not at once.
///
/// A whole file that fails its hash (``TransferFailure/damaged(_:)``) is that mirror's failure, and the
/// request does not ask that mirror for it again: a file is checked only once complete, so the parts it
/// came in counted as progress, and asking the same mirror again could fetch it again and again.
struct RetryPolicy: Sendable {
    /// What a mirror's non-retryable answer (404, 410, another 4xx) means for the request.
    enum Absence: Sendable {
        /// The file may not exist (a metadata probe such as the next root version): an answer is
        /// believed over mirrors that cannot be reached, so the request ends once each other mirror
        /// failed with a network error, or is cooling down and was not asked.
        case possible
        /// The file must exist (signed content): a mirror that lacks it is not asked again, the others are.
        case unexpected
    }

    /// What comes next: an attempt, or the end of the request.
    enum Decision: Sendable, Equatable {
        /// Ask `mirror` after waiting `after`.
        case attempt(mirror: Int, after: Duration)
        /// Stop; ``failures`` say why.
        case giveUp
    }

    /// The backoff's first ceiling and its largest: the wait before retry n is random up to
    /// min(cap, base × 2^(n-1)).
    static let base = 0.2
    static let cap = 5.0
    /// The longest wait a Retry-After header gets.
    static let maxRetryAfter: Duration = .seconds(30)

    let absence: Absence
    /// No attempt starts at or after this.
    let deadline: ContinuousClock.Instant?
    /// The mirror asked first when it is not cooling down (a metadata refresh that moves past a mirror).
    let preferred: Int?
    /// The last failure of each mirror that failed, in the order they first failed.
    private(set) var failures: [(mirror: Int, failure: TransferFailure)] = []
    /// This request's failures since it last delivered bytes.
    private(set) var failuresInARow = 0
    private var asked: Set<Int> = []
    /// Mirrors that answered non-retryably: not asked again.
    private var answered: Set<Int> = []
    /// Mirrors that served a damaged copy of the whole file: not asked for it again.
    private var damaged: Set<Int> = []

    init(absence: Absence = .unexpected, deadline: ContinuousClock.Instant? = nil, preferring preferred: Int? = nil) {
        self.absence = absence
        self.deadline = deadline
        self.preferred = preferred
    }

    /// The first attempt: the group's first mirror (the preferred one unless it is cooling down), at once.
    mutating func start(_ group: MirrorGroup, now: ContinuousClock.Instant) -> Decision {
        if let deadline, now >= deadline { return .giveUp }
        let mirror = group.order(now: now, preferring: preferred)[0]
        asked.insert(mirror)
        return .attempt(mirror: mirror, after: .zero)
    }

    /// Notes that the last attempt delivered and kept bytes, and the request goes on (a response in
    /// parts): the backoff starts over, and so does the group's streak.
    mutating func progressed(_ group: inout MirrorGroup) {
        failuresInARow = 0
        group.progressed()
    }

    /// After the attempt on `mirror` failed with `failure` (having delivered and kept bytes first when
    /// `progressed`, as a response cut short does): records it here and in `group`, and decides what
    /// comes next. `random`, in [0, 1), is the jitter.
    mutating func next(
        after failure: TransferFailure, on mirror: Int, progressed: Bool, group: inout MirrorGroup,
        now: ContinuousClock.Instant, random: Double
    ) -> Decision {
        if progressed { self.progressed(&group) }
        record(failure, on: mirror)
        failuresInARow += 1
        if case .damaged = failure { damaged.insert(mirror) }
        if failure.isRetryable {
            group.failed(mirror: mirror, now: now, countsInStreak: !progressed, with: failure)
        } else {
            answered.insert(mirror)
            // A mirror that lacks signed content (one lagging behind the others) is asked last by the
            // sync's later requests too, without counting against the streak.
            if absence == .unexpected, failure.isMirrorAnswer {
                group.failed(mirror: mirror, now: now, countsInStreak: false, with: failure)
            }
        }
        guard !group.isExhausted else { return giveUp(group) }
        let candidates = group.order(now: now, preferring: preferred)
            .filter { !answered.contains($0) && !damaged.contains($0) }
        guard let choice = candidates.first else { return giveUp(group) }
        if absence == .possible, !answered.isEmpty, candidates.allSatisfy({ writtenOff($0, group: group, now: now) }) {
            return .giveUp
        }
        let wait = self.wait(before: choice, after: failure, on: mirror, group: group, now: now, random: random)
        if let deadline, now + wait >= deadline { return giveUp(group) }
        if group.outlasts(now + wait) { return giveUp(group) }
        asked.insert(choice)
        return .attempt(mirror: choice, after: wait)
    }

    /// Gives up on content that must exist, adding to ``failures`` what the mirrors this request did
    /// not ask (cooling down) last did in the sync, so the error names every mirror.
    private mutating func giveUp(_ group: MirrorGroup) -> Decision {
        for mirror in 0..<group.mirrorCount where !failures.contains(where: { $0.mirror == mirror }) {
            if let failure = group.lastFailure[mirror] { failures.append((mirror: mirror, failure: failure)) }
        }
        return .giveUp
    }

    /// Whether a file that may be absent is no longer asked of `mirror` once another mirror answered:
    /// when it could not be reached here (a network failure), or was not asked and is cooling down.
    private func writtenOff(_ mirror: Int, group: MirrorGroup, now: ContinuousClock.Instant) -> Bool {
        guard asked.contains(mirror) else { return group.isCooling(mirror, now: now) }
        switch failures.first(where: { $0.mirror == mirror })?.failure {
        case .network?, .unreachable?, .untrusted?: return true
        default: return false
        }
    }

    /// None before another mirror that is not cooling down; else the backoff, and at least the
    /// mirror's Retry-After (bounded) when the same mirror is asked again.
    private func wait(
        before choice: Int, after failure: TransferFailure, on mirror: Int, group: MirrorGroup,
        now: ContinuousClock.Instant, random: Double
    ) -> Duration {
        if choice != mirror && !group.isCooling(choice, now: now) { return .zero }
        let backoff = Self.backoff(max(failuresInARow, group.streak), random: random)
        guard choice == mirror, let retryAfter = failure.retryAfter else { return backoff }
        return max(backoff, min(retryAfter, Self.maxRetryAfter))
    }

    /// Exponential backoff with full jitter before retry `failures` (1 for the first retry).
    static func backoff(_ failures: Int, random: Double) -> Duration {
        let ceiling = min(cap, base * pow(2.0, Double(min(30, max(0, failures - 1)))))
        return .milliseconds(Int64(ceiling * min(1, max(0, random)) * 1000))
    }

    private mutating func record(_ failure: TransferFailure, on mirror: Int) {
        if let index = failures.firstIndex(where: { $0.mirror == mirror }) {
            failures[index].failure = failure
        } else {
            failures.append((mirror: mirror, failure: failure))
        }
    }
}

extension TransferFailure {
    /// Whether asking again may help: network failures (a mirror that cannot be reached among them),
    /// 5xx, 429 and 408, a wrong range or body, bytes that failed verification (a damaged whole file on
    /// another mirror). "Not found", other 4xx and a certificate that does not verify are the mirror's
    /// answer; a local failure (the sink could not write) is not the mirror's doing.
    var isRetryable: Bool {
        switch self {
        case .network, .unreachable, .wrongRange, .tooLarge, .damaged: return true
        case .httpStatus(let code, _): return code >= 500 || code == 429 || code == 408
        case .refused(let error): return error.code == .refusedData
        case .notFound, .cancelled, .untrusted: return false
        }
    }

    /// Whether the mirror could not be reached at all (refused, unresolved, no route): it is offline, not failing.
    var isUnreachable: Bool {
        if case .unreachable = self { return true }
        return false
    }

    /// Whether the mirror answered that it lacks the file or refuses the request (404, 410, another
    /// 4xx), or cannot be trusted (its TLS certificate does not verify).
    var isMirrorAnswer: Bool {
        switch self {
        case .notFound, .untrusted: return true
        case .httpStatus(let code, _): return (400..<500).contains(code) && !isRetryable
        default: return false
        }
    }

    /// How long the mirror asked to be left alone (its Retry-After), if it said.
    var retryAfter: Duration? {
        if case .httpStatus(_, let retryAfter) = self { return retryAfter }
        return nil
    }
}
