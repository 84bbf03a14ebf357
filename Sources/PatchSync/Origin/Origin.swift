import Foundation
import Logging

/// The publisher's origin as the client sees it: an ordered list of mirrors
/// (http, https or file URLs of the same published folder) behind one HTTPClient.
final class Origin: MetadataSource, Sendable {
    let mirrors: [String]
    let client: HTTPClient
    private static let logger = Logger(label: "patchsync.origin")

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
    /// `escaped` paths are used in URLs as they are.
    func whole(_ path: String, maxBytes: Int64, timeout: TimeInterval? = nil,
               escaped: Bool = false) async throws(PatchSyncError) -> Data? {
        var failures: [(String, TransferFailure)] = []
        for index in mirrors.indices {
            let url = escaped ? mirrors[index] + "/" + path : url(path, mirror: index)
            switch await client.fetchData(url: url, maxBytes: maxBytes, timeout: timeout) {
            case .success(let data): return data
            case .failure(let failure):
                failures.append((mirrors[index], failure))
                Self.logger.notice("fetching \(url) failed: \(failure)")
            }
            if Task.isCancelled { throw PatchSyncError.cancelled }
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
