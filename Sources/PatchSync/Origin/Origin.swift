import Foundation
import Logging
import Synchronization

/// The publisher's origin as the client sees it: an ordered list of mirrors
/// (http, https or file URLs of the same published folder) behind one HTTPClient.
final class Origin: MetadataSource, Sendable {
    let mirrors: [String]
    let client: HTTPClient
    private static let logger = Logger(label: "patchsync.origin")
    /// A mirror that failed at the network level (unreachable, stalled, too slow) is asked last
    /// until this long has passed, so one bad mirror does not cost every request a timeout.
    static let coolDown: TimeInterval = 60
    private let cooling: Mutex<[Int: Date]> = Mutex([:])

    init(mirrors: [String], client: HTTPClient) throws(PatchSyncError) {
        try Self.checkMirrors(mirrors)
        self.mirrors = mirrors.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        self.client = client
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

    /// Notes a failure of mirror `index`; a network failure starts its cool-down.
    func noteFailure(_ failure: TransferFailure, mirror index: Int) {
        guard case .network = failure else { return }
        cooling.withLock { $0[index] = Date() + Self.coolDown }
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
    /// `escaped` paths are used in URLs as they are. When every mirror failed only at the
    /// network level (unreachable, cut off for slow retrieval), the mirrors are tried once more.
    func whole(_ path: String, maxBytes: Int64, timeout: TimeInterval? = nil,
               escaped: Bool = false) async throws(PatchSyncError) -> Data? {
        let deadline = timeout.map { Date() + $0 }
        var failures: [(String, TransferFailure)] = []
        for round in 0..<Self.rounds {
            failures.removeAll()
            for index in order() {
                let url = escaped ? mirrors[index] + "/" + path : url(path, mirror: index)
                let remaining = deadline.map { $0.timeIntervalSinceNow }
                if let remaining, remaining <= 0 { break }
                switch await client.fetchData(url: url, maxBytes: maxBytes, timeout: remaining) {
                case .success(let data): return data
                case .failure(let failure):
                    failures.append((mirrors[index], failure))
                    noteFailure(failure, mirror: index)
                    Self.logger.notice("fetching \(url) failed (round \(round + 1)): \(failure)")
                }
                if Task.isCancelled { throw PatchSyncError.cancelled }
            }
            // A mirror that answers "not found" is believed over ones that cannot be reached.
            let answered = failures.filter { if case .network = $0.1 { return false }; return true }
            if !answered.isEmpty {
                if answered.allSatisfy({ if case .notFound = $0.1 { return true }; return false }) { return nil }
                break
            }
        }
        throw Origin.error(fetching: path, failures)
    }

    /// How many times the mirror list is tried when every failure was a network failure.
    static let rounds = 2

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
