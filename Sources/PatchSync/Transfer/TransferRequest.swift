import Foundation
import Synchronization

/// One GET, optionally of a byte range, with a hard bound on the body.
struct TransferRequest: Sendable {
    var url: String
    /// Inclusive byte range; nil for the whole resource.
    var range: ClosedRange<Int64>?
    /// The body may not exceed this many bytes (the range's length when a range is given).
    var maxBytes: Int64
    /// The whole transfer must end within this many seconds (nil: the client's per-request deadline).
    var timeout: TimeInterval?
    /// Redirects are followed only when the request and the client's settings both allow them: never for
    /// a LAN peer, which must not send the player's requests elsewhere.
    var followRedirects = true
    /// The body is the origin's: counted in ``HTTPClient/bytesReceived`` and, as it arrives, in the
    /// sync's progress. False for a LAN peer's answer, which the sync counts apart (``Peers/bytes``) and
    /// whose bytes only tell its meter that the network is alive. Either way it takes the client's
    /// bandwidth budget.
    var fromOrigin = true

    init(url: String, range: ClosedRange<Int64>? = nil, maxBytes: Int64) {
        self.url = url
        self.range = range
        self.maxBytes = range.map { min(maxBytes, $0.upperBound - $0.lowerBound + 1) } ?? maxBytes
    }
}

/// What a completed transfer reports.
struct TransferResponse: Sendable {
    var status: Int
    var bytes: Int64
    /// The final response's headers, by lowercased name (the last of a repeated one).
    var headers: [String: String] = [:]
}

/// Why a transfer did not deliver what was asked.
enum TransferFailure: Error, Sendable, CustomStringConvertible {
    /// The origin has no such resource (HTTP 404/410, or a missing file).
    case notFound
    /// An HTTP error status, with the wait its Retry-After header asked for (503, 429), if any.
    case httpStatus(Int, retryAfter: Duration? = nil)
    /// Connection, TLS, timeout or protocol failure, as libcurl words it.
    case network(String)
    /// The mirror could not be reached at all (as libcurl words it): the connection was refused, its name
    /// did not resolve, there is no route to it, or no connection was made in time (a SYN dropped). The
    /// origin is offline for now (a restart, a Wi-Fi handover, a resume from suspend), so it is asked
    /// again until the give-up time, not for a streak.
    case unreachable(String)
    /// The mirror's TLS certificate cannot be verified (as libcurl words it): asking it again cannot
    /// help until its certificate or the install's `caFile` changes.
    case untrusted(String)
    /// The body would have exceeded the bound.
    case tooLarge(Int64)
    /// The origin answered another range than the one asked, or a short body.
    case wrongRange(String)
    /// The sink refused the bytes (a hash mismatch, a local write error).
    case refused(PatchSyncError)
    /// A whole file arrived and does not match its signed length or SHA-256 (as the text says): this
    /// mirror's copy is damaged or stale. Its parts cannot be told apart, so none of them counts as kept.
    case damaged(String)
    /// The caller's task was cancelled.
    case cancelled

    var description: String {
        switch self {
        case .notFound: return "not found"
        case .httpStatus(let code, _): return "HTTP status \(code)"
        case .network(let text), .unreachable(let text), .untrusted(let text), .damaged(let text): return text
        case .tooLarge(let limit): return "response exceeds the \(limit) bytes allowed"
        case .wrongRange(let text): return "wrong range: \(text)"
        case .refused(let error): return error.description
        case .cancelled: return "cancelled"
        }
    }
}

/// Receives a response body, piece by piece, on the transfer thread.
protocol ResponseSink: AnyObject {
    /// Takes the next piece of the body; returns an error to abort the transfer.
    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError?
    /// `count` bytes of the body arrived and were dropped before the sink (what precedes a range in a
    /// whole-file answer): the network is alive, though nothing was received.
    func dropped(_ count: Int)
}

extension ResponseSink {
    func dropped(_ count: Int) {}
}

/// A sink that collects a bounded body in memory (metadata, manifests).
///
/// Thread-safety: a `Mutex` holds the body (uncontended: written on the transfer thread, read after
/// the transfer completed).
final class DataSink: ResponseSink, Sendable {
    private let body = Mutex(Data())

    /// The body received so far.
    var data: Data { body.withLock { $0 } }

    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError? {
        body.withLock { $0.append(contentsOf: bytes) }
        return nil
    }
}
