import Foundation
import Logging
import Synchronization

/// The publisher's origin as the client sees it: an ordered list of mirrors
/// (http, https or file URLs of the same published folder) behind one HTTPClient.
final class Origin: MetadataSource, Sendable {
    let mirrors: [String]
    let client: HTTPClient
    private static let logger = Logger(label: "patchsync.origin")
    /// A mirror that gave up on a request for a retryable reason (unreachable, stalled, 5xx, bad
    /// bytes) is asked last until this long has passed, so one bad mirror does not cost every request
    /// its retries and timeouts.
    static let coolDown: TimeInterval = 60
    private let cooling: Mutex<[Int: Date]> = Mutex([:])

    /// Requests per mirror before moving on: the first try plus retries after exponential backoff.
    let attemptsPerMirror: Int

    init(mirrors: [String], client: HTTPClient, attemptsPerMirror: Int = 3) throws(PatchSyncError) {
        try Self.checkMirrors(mirrors)
        self.mirrors = mirrors.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        self.client = client
        self.attemptsPerMirror = max(1, attemptsPerMirror)
    }

    /// Whether asking the same mirror again may help: network failures, 5xx and 429, a wrong range
    /// or body, bytes that failed verification. "Not found" and other 4xx are the mirror's answer.
    static func isRetryable(_ failure: TransferFailure) -> Bool {
        switch failure {
        case .network, .wrongRange, .tooLarge: return true
        case .httpStatus(let code): return code >= 500 || code == 429 || code == 408
        case .refused(let error): return error.code == .refusedData
        case .notFound, .cancelled: return false
        }
    }

    /// Exponential backoff with full jitter: a random wait up to min(5 s, 0.2 s × 2^(attempt-1)).
    static func backoff(attempt: Int) -> Duration {
        let cap = min(5.0, 0.2 * pow(2.0, Double(max(0, attempt - 1))))
        return .milliseconds(Int(Double.random(in: 0...cap) * 1000))
    }

    /// Sleeps before retry `attempt`; a cancelled task stops waiting and reports it.
    func pause(before attempt: Int) async throws(PatchSyncError) {
        do { try await Task.sleep(for: Self.backoff(attempt: attempt)) } catch { throw PatchSyncError.cancelled }
    }

    /// Refuses an empty list or a URL of another scheme.
    static func checkMirrors(_ mirrors: [String]) throws(PatchSyncError) {
        guard !mirrors.isEmpty else {
            throw PatchSyncError(.usage, "no remote is configured", remedy: "add one with `patchsync init --remote URL`")
        }
        for mirror in mirrors {
            let lower = mirror.lowercased()
            guard lower.hasPrefix("http://") || lower.hasPrefix("https://") || lower.hasPrefix("file://") else {
                throw PatchSyncError(.usage, "remote \(mirror) is not an http://, https:// or file:// URL")
            }
        }
    }

    /// Mirror indices in the order to try them: healthy mirrors in configured order, then cooling ones.
    func order() -> [Int] {
        let now = Date()
        let cold = cooling.withLock { state in Set(state.filter { $0.value > now }.keys) }
        return mirrors.indices.filter { !cold.contains($0) } + mirrors.indices.filter { cold.contains($0) }
    }

    /// Notes that mirror `index` gave up on a request; a retryable failure starts its cool-down
    /// (it is asked last until then, and again first afterwards: fail-back).
    func noteFailure(_ failure: TransferFailure, mirror index: Int) {
        guard Self.isRetryable(failure) else { return }
        cooling.withLock { $0[index] = Date() + Self.coolDown }
    }

    /// After attempt `attempt` at `url` on mirror `index` failed: whether to ask the same mirror again
    /// (a retryable failure with attempts left). When not, the failure is kept for the final error and the
    /// mirror's cool-down starts (``noteFailure(_:mirror:)``).
    func retries(after failure: TransferFailure, attempt: Int, url: String, mirror index: Int,
                 failures: inout [(String, TransferFailure)]) -> Bool {
        Self.logger.notice("fetching \(url) failed (attempt \(attempt)): \(failure)")
        if Self.isRetryable(failure), attempt < attemptsPerMirror { return true }
        failures.append((mirrors[index], failure))
        noteFailure(failure, mirror: index)
        return false
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
        try await whole("metadata/" + name, maxBytes: maxBytes, timeout: timeout, escaped: true)
    }

    /// A whole file of the origin, bounded; nil when every mirror says it does not exist.
    /// `escaped` paths are used in URLs as they are. Each mirror is asked up to ``attemptsPerMirror``
    /// times for retryable failures (with backoff), healthy mirrors first.
    func whole(_ path: String, maxBytes: Int64, timeout: TimeInterval? = nil,
               escaped: Bool = false) async throws(PatchSyncError) -> Data? {
        let deadline = timeout.map { Date() + $0 }
        var failures: [(String, TransferFailure)] = []
        mirrors: for index in order() {
            let url = escaped ? mirrors[index] + "/" + path : url(path, mirror: index)
            for attempt in 1...attemptsPerMirror {
                let remaining = deadline.map { $0.timeIntervalSinceNow }
                if let remaining, remaining <= 0 { break mirrors }
                if attempt > 1 { try await pause(before: attempt) }
                switch await client.fetchData(url: url, maxBytes: maxBytes, timeout: remaining) {
                case .success(let data): return data
                case .failure(let failure):
                    if Task.isCancelled { throw PatchSyncError.cancelled }
                    guard retries(after: failure, attempt: attempt, url: url, mirror: index, failures: &failures) else {
                        continue mirrors
                    }
                }
            }
        }
        // A mirror that answers "not found" is believed over ones that cannot be reached.
        let answered = failures.filter { if case .network = $0.1 { return false }; return true }
        if !answered.isEmpty, answered.allSatisfy({ if case .notFound = $0.1 { return true }; return false }) {
            return nil
        }
        throw Origin.error(fetching: path, failures)
    }

    /// The error when every mirror failed: refused data (65) when some mirror served
    /// bytes that failed verification or bounds, else origin unavailable (69). Local failures
    /// (disk full) never get here: the fetch rethrows them with their own code at once.
    static func error(fetching what: String, _ failures: [(String, TransferFailure)]) -> PatchSyncError {
        let list = failures.map { "\($0.0): \($0.1)" }.joined(separator: "; ")
        let refused = failures.contains {
            switch $0.1 {
            case .refused, .tooLarge, .wrongRange: return true
            default: return false
            }
        }
        return PatchSyncError(refused ? .refusedData : .originUnavailable, "fetching \(what) failed on every mirror: \(list)",
                              remedy: refused ? "a mirror serves damaged or wrong data; report it to the publisher"
                                  : "check the network and the remotes, then run sync again; progress is kept")
    }
}
