internal import CCurl
import Foundation
import Synchronization

/// The state of one transfer while libcurl runs it.
///
/// Thread-safety: created by the caller, then touched only on the transfer
/// thread (callbacks and completion) until `complete` resumes the caller once.
final class TransferBox: @unchecked Sendable {
    let request: TransferRequest
    let cancel: CancelFlag
    private let sink: any ResponseSink
    private var continuation: CheckedContinuation<Result<TransferResponse, TransferFailure>, Never>?
    /// Body bytes handed to the sink.
    private(set) var received: Int64 = 0
    /// Body bytes that arrived, including any the sink never saw (a whole file sent for a range).
    private(set) var arrived: Int64 = 0
    /// Set when a range arrived inside a whole-file answer: the rest is not wanted.
    private(set) var satisfied = false
    /// Bytes to drop before the range starts, when the origin ignored Range and sent the whole file.
    private var skip: Int64 = 0
    private(set) var failure: TransferFailure?
    private(set) var checkedStatus = false
    private(set) var status = 0
    private var contentRange: String?
    private var contentLength: Int64?
    /// The wait the final response's Retry-After header asks for.
    private var retryAfter: Duration?
    /// The final response's headers, by lowercased name.
    private(set) var headers: [String: String] = [:]
    /// libcurl's own words for a failure ("Operation too slow. Less than…"), CURLOPT_ERRORBUFFER.
    let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))

    init(
        request: TransferRequest, sink: any ResponseSink, cancel: CancelFlag,
        continuation: CheckedContinuation<Result<TransferResponse, TransferFailure>, Never>
    ) {
        self.request = request
        self.cancel = cancel
        self.sink = sink
        self.continuation = continuation
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit { errorBuffer.deallocate() }

    /// What libcurl said about the failure, if anything.
    var curlMessage: String? {
        let text = String(cString: errorBuffer).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : text
    }

    /// Resumes the waiting caller; later calls do nothing.
    func complete(_ result: Result<TransferResponse, TransferFailure>) {
        continuation?.resume(returning: result)
        continuation = nil
    }

    func header(_ line: String) {
        if line.hasPrefix("HTTP/") { (contentRange, contentLength, retryAfter, headers) = (nil, nil, nil, [:]) }
        if let colon = line.firstIndex(of: ":"), headers.count < 64 {
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                in: .whitespacesAndNewlines)
        }
        let lower = line.lowercased()
        if lower.hasPrefix("content-range:") {
            contentRange = String(line.dropFirst("content-range:".count)).trimmingCharacters(
                in: .whitespacesAndNewlines)
        } else if lower.hasPrefix("content-length:") {
            contentLength = Int64(
                line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespacesAndNewlines))
        } else if lower.hasPrefix("retry-after:") {
            retryAfter = Self.parseRetryAfter(String(line.dropFirst("retry-after:".count)), now: Date())
        }
    }

    /// What the write callback tells libcurl.
    enum WriteOutcome {
        case accepted
        /// Keep the bytes and pause (the shared bandwidth budget is spent).
        case pause
        /// End the transfer: `failure` says why, or `satisfied` that nothing more is wanted.
        case stop
    }

    /// The shared bandwidth budget, when a cap is set (transfer thread only).
    var limiter: RateLimiter?
    /// Whether this response's time to first byte went to the limiter.
    private var sampledLatency = false

    /// Takes a piece of the body.
    func write(_ bytes: UnsafeRawBufferPointer) -> WriteOutcome {
        if cancel.isSet { return .stop }
        if let limiter {
            if !sampledLatency, let easy = currentEasy {  // at the first byte, not once a paused body is read
                sampledLatency = true
                // Only the origin's round trips tell the yielding controller of congestion: a LAN peer's
                // millisecond would become its baseline and make every origin look congested.
                if request.fromOrigin, let latency = Self.timeToFirstByte(easy) { limiter.observe(latency: latency) }
            }
            guard limiter.available else {
                limiter.pause(self)
                return .pause
            }
            limiter.take(bytes.count)
        }
        return accept(bytes) ? .accepted : .stop
    }

    /// Checks and hands on a piece; false ends the transfer.
    private func accept(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if !checkedStatus, let easy = currentEasy, let problem = checkStatus(easy) {
            failure = problem
            return false
        }
        arrived += Int64(bytes.count)
        var piece = bytes[...]
        if skip > 0 {  // a whole file for a range: drop what precedes the range
            let dropped = Int(min(skip, Int64(piece.count)))
            piece = piece.dropFirst(dropped)
            skip -= Int64(dropped)
            sink.dropped(dropped)
            if piece.isEmpty { return true }
        }
        if let range = request.range, status == 200 {  // and stop once the range is complete
            let wanted = range.upperBound - range.lowerBound + 1 - received
            if Int64(piece.count) >= wanted {
                piece = piece.prefix(Int(wanted))
                satisfied = true
            }
        }
        received += Int64(piece.count)
        guard received <= request.maxBytes else {
            failure = .tooLarge(request.maxBytes)
            return false
        }
        if let error = sink.receive(UnsafeRawBufferPointer(rebasing: piece)) {
            failure = .refused(error)
            return false
        }
        return !satisfied  // a short count ends the transfer; `satisfied` makes it a success
    }

    /// The easy handle is not passed to write callbacks, so the box keeps it while running.
    var currentEasy: UnsafeMutableRawPointer?

    /// Checks the response status and Content-Range against the request, once.
    func checkStatus(_ easy: UnsafeMutableRawPointer) -> TransferFailure? {
        checkedStatus = true
        var code = 0
        ccurl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &code)
        status = code
        guard request.url.lowercased().hasPrefix("http") else { return nil }
        if code == 404 || code == 410 || code == 403 { return .notFound }
        guard (200..<300).contains(code) else { return .httpStatus(code, retryAfter: retryAfter) }
        guard let range = request.range else {
            guard code == 200 else { return .httpStatus(code) }
            if let contentLength, contentLength > request.maxBytes { return .tooLarge(request.maxBytes) }
            return nil
        }
        if code == 200 {
            // The origin ignored Range (some CDNs do for objects not yet cached): read up to the
            // range's end of the whole file, drop the rest. Bounded by the range's end.
            if let contentLength, contentLength <= range.upperBound {
                return .wrongRange(
                    "asked bytes \(range.lowerBound)-\(range.upperBound), the whole file is \(contentLength) bytes")
            }
            skip = range.lowerBound
            return nil
        }
        guard code == 206 else { return .httpStatus(code) }
        let expected = "bytes \(range.lowerBound)-\(range.upperBound)/"
        guard let contentRange, contentRange.hasPrefix(expected) else {
            return .wrongRange("asked \(expected)…, Content-Range is \(contentRange.map { "\"\($0)\"" } ?? "missing")")
        }
        let length = range.upperBound - range.lowerBound + 1
        if let contentLength, contentLength != length {
            return .wrongRange("asked \(length) bytes, Content-Length is \(contentLength)")
        }
        return nil
    }
}

/// Set once when the task waiting for a transfer is cancelled; read on the transfer thread.
///
/// Thread-safety: an atomic flag.
final class CancelFlag: Sendable {
    private let flag = Atomic<Bool>(false)

    func set() { flag.store(true, ordering: .releasing) }
    var isSet: Bool { flag.load(ordering: .acquiring) }
}

extension TransferBox {
    /// Seconds from the request sent to the first response byte (CURLINFO_STARTTRANSFER_TIME_T
    /// minus CURLINFO_PRETRANSFER_TIME_T): round trip, server time and any queue on the way.
    private static func timeToFirstByte(_ easy: UnsafeMutableRawPointer) -> Double? {
        var sent: curl_off_t = 0, first: curl_off_t = 0
        guard ccurl_easy_getinfo_off_t(easy, CURLINFO_PRETRANSFER_TIME_T, &sent) == CURLE_OK,
            ccurl_easy_getinfo_off_t(easy, CURLINFO_STARTTRANSFER_TIME_T, &first) == CURLE_OK,
            first >= sent, first > 0
        else { return nil }
        return Double(first - sent) / 1_000_000
    }
}

extension TransferBox {
    /// The wait a Retry-After header value asks for (RFC 9110, 10.2.3): delay-seconds, or an HTTP-date
    /// (IMF-fixdate, RFC 850 or asctime form) measured from `now`, zero when it has passed; nil for
    /// anything else. Unbounded here: the retry policy caps what it honours.
    static func parseRetryAfter(_ value: String, now: Date) -> Duration? {
        let text = value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { return nil }
        if text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            return .seconds(min(Int64(text) ?? Int64.max, 86_400))  // more digits than fit: a day is plenty
        }
        return httpDate(text).map { .seconds(Int64(max(0, $0.timeIntervalSince(now)).rounded(.up))) }
    }

    /// An HTTP-date (RFC 9110, 5.6.7) in any of its three forms: IMF-fixdate, RFC 850 or asctime.
    static func httpDate(_ text: String) -> Date? {
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(secondsFromGMT: 0)
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}
