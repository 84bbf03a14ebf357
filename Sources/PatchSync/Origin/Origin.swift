import Foundation
import Logging
import Synchronization

/// The publisher's origin as the client sees it: an ordered list of mirrors
/// (http, https or file URLs of the same published folder) behind one HTTPClient.
final class Origin: MetadataSource, Sendable {
    let mirrors: [String]
    let client: HTTPClient
    private static let logger = Logger(label: "patchsync.origin")
    /// What this sync's requests share about the mirrors (the failure streak, cool-downs); every
    /// request's ``RetryPolicy`` reads and updates it under the lock.
    private let group: Mutex<MirrorGroup>

    /// `failureStreak`: failed requests in a row, with no byte delivered between them, after which
    /// requests give up (``MirrorGroup``). Mirrors that cannot be reached are asked again until
    /// ``MirrorGroup/defaultGiveUp`` has passed; in a sync (a client with a meter) until its watch gives up.
    init(
        mirrors: [String], client: HTTPClient,
        failureStreak: Int = MirrorGroup.defaultFailureStreak
    ) throws(PatchSyncError) {
        try Self.checkMirrors(mirrors)
        self.mirrors = mirrors.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        self.client = client
        let giveUpAfter = client.meter == nil ? MirrorGroup.defaultGiveUp : nil
        group = Mutex(MirrorGroup(mirrors: mirrors.count, failureStreak: failureStreak, giveUpAfter: giveUpAfter))
    }

    /// What one attempt at a request came to, as the request tells ``withRetries(_:absence:deadline:preferring:onGiveUp:_:)``.
    enum Attempt<Value> {
        /// The request is complete.
        case done(Value)
        /// This part arrived and was kept; the next part of the request is asked at once.
        case more
        /// The attempt failed; `progressed` when it delivered and kept bytes first (a response cut
        /// short): the sync's failure streak starts over, and the request goes on from there.
        case failed(TransferFailure, progressed: Bool)
    }

    /// Runs `attempt` on the mirrors as ``RetryPolicy`` decides (which mirror, how long to wait) until
    /// it is done, and returns its value. When the policy gives up, returns what `onGiveUp` makes of
    /// each mirror's last failure, or by default throws ``error(fetching:_:)`` for `what`. A local
    /// failure (a sink that could not write) is thrown at once; cancellation while waiting or
    /// fetching throws ``PatchSyncError/cancelled``. The one place where requests wait to retry.
    func withRetries<Value>(
        _ what: String, absence: RetryPolicy.Absence = .unexpected,
        deadline: ContinuousClock.Instant? = nil, preferring preferred: Int? = nil,
        onGiveUp: (([(String, TransferFailure)]) throws(PatchSyncError) -> Value)? = nil,
        _ attempt: (_ mirror: Int) async throws(PatchSyncError) -> Attempt<Value>
    )
        async throws(PatchSyncError) -> Value
    {
        var policy = RetryPolicy(absence: absence, deadline: deadline, preferring: preferred)
        var decision = group.withLock { policy.start($0, now: .now) }
        var attempts = 0
        while case .attempt(let mirror, let wait) = decision {
            attempts += 1
            if let meter = client.meter, wait > .zero {
                if Task.isCancelled { throw PatchSyncError.cancelled }
                try await meter.backingOff(wait)
            } else {
                try await Self.pause(wait)
            }
            let outcome = try await attempt(mirror)
            if Task.isCancelled { throw PatchSyncError.cancelled }
            switch outcome {
            case .done(let value):
                group.withLock { $0.progressed() }
                return value
            case .more:
                group.withLock { policy.progressed(&$0) }
                decision = .attempt(mirror: mirror, after: .zero)
            case .failed(let failure, let progressed):
                if case .refused(let error) = failure, error.code != .refusedData { throw error }  // a local failure
                if case .cancelled = failure { throw PatchSyncError.cancelled }
                decision = failed(
                    what, failure, on: mirror, progressed: progressed, attempts: attempts, absence: absence,
                    policy: &policy)
            }
        }
        let failures = policy.failures.map { (mirrors[$0.mirror], $0.failure) }
        if let onGiveUp { return try onGiveUp(failures) }
        throw Origin.error(fetching: what, failures)
    }

    /// After a failed attempt on `mirror`: logs it, asks the policy what comes next, and tells the meter
    /// when no mirror can be reached and when the request is tried again.
    private func failed(
        _ what: String, _ failure: TransferFailure, on mirror: Int, progressed: Bool, attempts: Int,
        absence: RetryPolicy.Absence, policy: inout RetryPolicy
    ) -> RetryPolicy.Decision {
        var decision = RetryPolicy.Decision.giveUp
        // A probe for a file that may not exist (the next root version) finding none is the normal answer.
        let expected: Bool
        if case .notFound = failure, case .possible = absence { expected = true } else { expected = false }
        if expected {
            Self.logger.debug("\(what) on \(mirrors[mirror]): not there (expected)")
        } else {
            Self.logger.notice("\(what) on \(mirrors[mirror]) failed: \(failure)")
        }
        let random = Double.random(in: 0..<1)
        let offline = group.withLock { group -> String? in
            decision = policy.next(
                after: failure, on: mirror, progressed: progressed, group: &group, now: .now, random: random)
            guard group.isOffline else { return nil }
            return group.lastFailure.sorted { $0.key < $1.key }.map { "\(mirrors[$0.key]): \($0.value)" }
                .joined(separator: "; ")
        }
        if let offline, case .attempt = decision { client.meter?.offline(offline) }
        if !expected, case .attempt(let next, let after) = decision, let meter = client.meter {
            meter.retrying(
                RetryStatus(
                    what: what, mirror: mirrors[next], failedMirror: mirrors[mirror], attempt: attempts,
                    retryInSeconds: Int(after.inSeconds.rounded(.up)),
                    failure: failure.description))
        }
        return decision
    }

    /// Waits before a retry; a cancelled task stops waiting and reports it.
    private static func pause(_ duration: Duration) async throws(PatchSyncError) {
        if Task.isCancelled { throw PatchSyncError.cancelled }
        guard duration > .zero else { return }
        do { try await Task.sleep(for: duration) } catch { throw PatchSyncError.cancelled }
    }

    /// Refuses an empty list or a URL of another scheme.
    static func checkMirrors(_ mirrors: [String]) throws(PatchSyncError) {
        guard !mirrors.isEmpty else {
            throw PatchSyncError(
                .usage, "no remote is configured", remedy: "add one with `patchsync init --remote URL`")
        }
        for mirror in mirrors {
            let lower = mirror.lowercased()
            guard lower.hasPrefix("http://") || lower.hasPrefix("https://") || lower.hasPrefix("file://") else {
                throw PatchSyncError(.usage, "remote \(mirror) is not an http://, https:// or file:// URL")
            }
        }
    }

    /// The URL of `path` (relative to the origin root) on mirror `index`.
    func url(_ path: String, mirror index: Int) -> String {
        let escaped = path.addingPercentEncoding(withAllowedCharacters: Self.pathCharacters) ?? path
        return mirrors[index] + "/" + escaped
    }

    private static let pathCharacters: CharacterSet = {
        var set = CharacterSet.alphanumerics
        set.insert(charactersIn: "/-._~")
        return set
    }()

    func metadata(_ name: String, maxBytes: Int64, timeout: TimeInterval?) async throws(PatchSyncError) -> Data? {
        try await whole(OriginLayout.metadata(name), maxBytes: maxBytes, timeout: timeout, escaped: true)
    }

    /// A whole file of the origin, bounded; nil when the mirrors that answered all say it does not
    /// exist (a file that may be absent: ``RetryPolicy/Absence/possible``). `escaped` paths are used in
    /// URLs as they are. Retried as ``withRetries(_:absence:deadline:preferring:onGiveUp:_:)`` does,
    /// `preferred` mirror first; no attempt starts after `timeout` seconds.
    func whole(
        _ path: String, maxBytes: Int64, timeout: TimeInterval? = nil, escaped: Bool = false,
        preferring preferred: Int? = nil
    ) async throws(PatchSyncError) -> Data? {
        let deadline = timeout.map { ContinuousClock.now + .milliseconds(Int64(min(max(0, $0), 1e9) * 1000)) }
        return try await withRetries(
            path, absence: .possible, deadline: deadline, preferring: preferred,
            onGiveUp: { (failures) throws(PatchSyncError) -> Data? in
                guard Origin.allAbsent(failures) else { throw Origin.error(fetching: path, failures) }
                return nil
            }
        ) { (mirror: Int) async throws(PatchSyncError) -> Attempt<Data?> in
            let url = escaped ? mirrors[mirror] + "/" + path : self.url(path, mirror: mirror)
            let remaining = deadline.map { ($0 - ContinuousClock.now).inSeconds }
            switch await client.fetchData(url: url, maxBytes: maxBytes, timeout: remaining) {
            case .success(let data): return .done(data)
            case .failure(let failure): return .failed(failure, progressed: false)
            }
        }
    }

    /// Signed content fetched whole (a manifest, a manifest delta): each mirror's answer is checked
    /// against the signed length and SHA-256 inside the attempt, so a mirror that serves a stale or
    /// damaged copy is passed over for the next (``TransferFailure/damaged(_:)``), as one that fails
    /// is. Refused bytes from every mirror end in 65, other failures in 69.
    func signed(_ path: String, length: Int64, sha256: String) async throws(PatchSyncError) -> Data {
        try await withRetries(path, absence: .unexpected) {
            (mirror: Int) async throws(PatchSyncError) -> Attempt<Data> in
            let url = self.url(path, mirror: mirror)
            switch await client.fetchData(url: url, maxBytes: length, timeout: nil) {
            case .success(let data) where data.count == length && SHA256Hasher.hash(data).hex == sha256:
                return .done(data)
            case .success:
                return .failed(
                    .damaged("\(url) does not match the length and SHA-256 that targets metadata signs"),
                    progressed: false)
            case .failure(let failure): return .failed(failure, progressed: false)
            }
        }
    }

    /// Whether the mirrors that answered all said "not found": a mirror's answer is believed over
    /// mirrors that cannot serve (a network failure, 5xx, 429, 408).
    static func allAbsent(_ failures: [(String, TransferFailure)]) -> Bool {
        let answered = failures.map { $0.1 }.filter { failure in
            switch failure {
            case .network, .unreachable, .untrusted: return false  // could not be asked: no answer about the file
            case .httpStatus: return !failure.isRetryable
            default: return true
            }
        }
        return !answered.isEmpty
            && answered.allSatisfy {
                if case .notFound = $0 { return true }
                return false
            }
    }

    /// The error when every mirror failed: refused data (65) when some mirror served
    /// bytes that failed verification or bounds, else origin unavailable (69). Local failures
    /// (disk full) never get here: the fetch rethrows them with their own code at once.
    static func error(fetching what: String, _ failures: [(String, TransferFailure)]) -> PatchSyncError {
        let list = failures.map { "\($0.0): \($0.1)" }.joined(separator: "; ")
        let refused = failures.contains {
            switch $0.1 {
            case .refused, .damaged, .tooLarge, .wrongRange: return true
            default: return false
            }
        }
        if !refused, allAbsent(failures) {
            // Every mirror that answered lacks a file signed metadata lists: the bucket lost it, or an
            // upload stopped before it; the network is not to blame.
            return PatchSyncError(
                .originUnavailable,
                "the origin lacks \(what), which signed metadata lists (every mirror that answered: not found): \(list)",
                remedy: "the publisher must upload it again (`patchsync upload ORIGIN BUCKET --verify`); "
                    + "run sync again after that; progress is kept")
        }
        return PatchSyncError(
            refused ? .refusedData : .originUnavailable, "fetching \(what) failed on every mirror: \(list)",
            remedy: refused
                ? "a mirror serves damaged or wrong data; report it to the publisher"
                : "check the network and the remotes, then run sync again; progress is kept")
    }
}

/// Where trusted metadata comes from: the origin's `metadata/` folder on some mirror.
protocol MetadataSource: Sendable {
    /// The named metadata file (a name safe to put in a URL as it is), at most `maxBytes` long,
    /// within `timeout` seconds when given; nil when no mirror has it.
    func metadata(_ name: String, maxBytes: Int64, timeout: TimeInterval?) async throws(PatchSyncError) -> Data?
}
