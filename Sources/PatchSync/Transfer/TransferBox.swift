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
    private(set) var received: Int64 = 0
    private(set) var failure: TransferFailure?
    private(set) var checkedStatus = false
    private(set) var status = 0
    private var contentRange: String?

    init(request: TransferRequest, sink: any ResponseSink, cancel: CancelFlag,
         continuation: CheckedContinuation<Result<TransferResponse, TransferFailure>, Never>) {
        self.request = request
        self.cancel = cancel
        self.sink = sink
        self.continuation = continuation
    }

    /// Resumes the waiting caller; later calls do nothing.
    func complete(_ result: Result<TransferResponse, TransferFailure>) {
        continuation?.resume(returning: result)
        continuation = nil
    }

    func header(_ line: String) {
        if line.hasPrefix("HTTP/") { contentRange = nil }
        let lower = line.lowercased()
        if lower.hasPrefix("content-range:") {
            contentRange = String(line.dropFirst("content-range:".count)).trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// Takes a piece of the body; false aborts the transfer with `failure` recorded.
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if cancel.isSet { return false }
        if !checkedStatus, let easy = currentEasy, let problem = checkStatus(easy) {
            failure = problem
            return false
        }
        received += Int64(bytes.count)
        guard received <= request.maxBytes else {
            failure = .tooLarge(request.maxBytes)
            return false
        }
        if let error = sink.receive(bytes) {
            failure = .refused(error)
            return false
        }
        return true
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
        guard (200..<300).contains(code) else { return .httpStatus(code) }
        guard let range = request.range else { return code == 200 ? nil : .httpStatus(code) }
        guard code == 206 else { return .wrongRange("the origin ignored Range (status \(code))") }
        let expected = "bytes \(range.lowerBound)-\(range.upperBound)/"
        guard let contentRange, contentRange.hasPrefix(expected) else {
            return .wrongRange("asked \(expected)…, Content-Range is \(contentRange ?? "missing")")
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
