internal import CCurl
import Foundation

/// Runs HTTP(S) and file transfers on libcurl's multi interface, on one thread.
///
/// Thread-safety: the transfer thread (``TransferLoop``) owns the multi handle and
/// every easy handle; callers only hand requests to its locked inbox and wake it
/// with curl_multi_wakeup. Results come back through continuations. Releasing the
/// client stops the thread after the transfers in flight complete.
final class HTTPClient: Sendable {
    /// Connection and timeout settings.
    struct Settings: Sendable {
        var maxConnections = 8
        var maxConnectionsPerHost = 6
        var connectTimeoutSeconds = 15
        /// A transfer slower than `lowSpeedBytes` per second for `lowSpeedSeconds` is aborted.
        var lowSpeedBytes = 1024
        var lowSpeedSeconds = 30
        var bufferSize = 256 * 1024
        var caFile: String?
        /// One cap on the bytes per second of all transfers together; nil: no cap.
        var maxBytesPerSecond: Int?
        /// The cap may be set or changed while transfers run (a sync's): a limiter is made even without one.
        var adjustableRate = false
        /// Below the cap, cut the rate while request latency shows a full link (``DelayController``).
        var yieldToOtherTraffic = false
        /// Follow redirects (up to 5, http(s) only), for requests that allow it
        /// (``TransferRequest/followRedirects``).
        var followRedirects = true
        /// Every request must end within this many seconds; nil: ``deadline(forBytes:)``'s bound.
        var requestTimeoutSeconds: Int?

        /// The deadline of one request for up to `bytes`: the configured one, else 60 s plus the time
        /// the body takes at the low-speed limit, so a transfer just above the limit still ends
        /// (at most a week, for unbounded bodies).
        func deadline(forBytes bytes: Int64) -> TimeInterval {
            if let requestTimeoutSeconds { return TimeInterval(requestTimeoutSeconds) }
            return min(7 * 86_400, 60 + Double(bytes) / Double(max(1, lowSpeedBytes)))
        }
    }

    private let loop: TransferLoop
    /// The sync's meter: every response's bytes are counted there as they arrive (a LAN peer's are
    /// heard, ``MeteredSink``).
    let meter: (any ByteMeter)?
    /// The most connections open at once, to every host together.
    let maxConnections: Int

    init(settings: Settings = Settings(), meter: (any ByteMeter)? = nil) throws(PatchSyncError) {
        self.meter = meter
        maxConnections = settings.maxConnections
        loop = try TransferLoop(settings: settings)
        // A transfer paused for the cap's tokens is the cap at work, not an origin that stalled.
        meter?.throttled { [loop] in loop.waitingForTokens }
        let thread = Thread { [loop] in loop.run() }
        thread.name = "patchsync-transfer"
        thread.start()
    }

    deinit { loop.stop() }

    /// Body bytes received from the origin so far (every transfer's but LAN peers',
    /// ``TransferRequest/fromOrigin``).
    var bytesReceived: Int64 { loop.bytesReceived }

    /// The bytes per second all transfers together may take now: the cap, or below it the rate a
    /// yielding client allows; nil without a cap.
    var rate: Double? { loop.rate }

    /// A new bandwidth cap for every transfer, running or to come (nil: none); only for a client made
    /// with a cap or ``Settings/adjustableRate``.
    func setMaxBytesPerSecond(_ bytesPerSecond: Int?) { loop.setMaxBytesPerSecond(bytesPerSecond) }

    /// While yielding to other traffic, how many bytes one request should ask for: a quarter
    /// second at the current rate, so that latency samples keep coming however low the rate falls;
    /// from 16 KiB (a chunk, in effect) to 512 KiB, so that one response never queues long on the
    /// link (it would hide other traffic's queue from the next sample, and push that traffic
    /// aside). nil when not yielding (any size).
    var requestBudget: Int? { loop.yieldingRate.map { min(512 << 10, max(16 << 10, Int($0 / 4))) } }

    /// Performs one request, handing the body to `sink` on the transfer thread.
    func fetch(_ request: TransferRequest, into sink: any ResponseSink) async -> Result<
        TransferResponse, TransferFailure
    > {
        let cancel = CancelFlag()
        let sink = metered(sink, for: request)
        meter?.requestBegan()
        defer { meter?.requestEnded() }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                loop.submit(TransferBox(request: request, sink: sink, cancel: cancel, continuation: continuation))
            }
        } onCancel: {
            cancel.set()
            loop.wake()
        }
        if let meter, let range = request.range, range.lowerBound > 0, case .success(let response) = result,
            response.status == 200,
            request.url.lowercased().hasPrefix("http")
        {
            meter.rangeIgnored(request.url, wasted: range.lowerBound)
        }
        return result
    }

    /// `sink` as the sync's meter takes the body of `request`: the origin's bytes count as they arrive,
    /// a LAN peer's are only heard.
    private func metered(_ sink: any ResponseSink, for request: TransferRequest) -> any ResponseSink {
        guard let meter else { return sink }
        // A LAN peer's body is heard (the network is alive, so the sync is not stalled), not counted as
        // progress: a peer sends a chunk raw, and the step counts it at its stored length once written.
        return MeteredSink(sink, meter: meter, counting: request.fromOrigin)
    }

    /// Fetches a whole small resource into memory, bounded by `maxBytes`.
    func fetchData(url: String, maxBytes: Int64, timeout: TimeInterval? = nil) async -> Result<Data, TransferFailure> {
        let sink = DataSink()
        var request = TransferRequest(url: url, maxBytes: maxBytes)
        request.timeout = timeout
        return await fetch(request, into: sink).map { _ in sink.data }
    }
}

/// The transfer thread's state: the multi handle, the inbox and the counters.
///
/// Thread-safety: `run()` is the only user of the multi and easy handles; `lock`
/// guards `inbox`, `stopping` and `bytesTotal`, which other threads touch.
private final class TransferLoop: @unchecked Sendable {
    private let multi: UnsafeMutableRawPointer
    private let settings: HTTPClient.Settings
    private let lock = NSLock()
    private var inbox: [TransferBox] = []
    private var stopping = false
    private var bytesTotal: Int64 = 0
    private let finished = DispatchSemaphore(value: 0)
    /// The shared bandwidth budget (transfer thread only).
    private let limiter: RateLimiter?

    /// True while some transfer is paused for want of the cap's tokens.
    var waitingForTokens: Bool { limiter?.hasPaused ?? false }

    init(settings: HTTPClient.Settings) throws(PatchSyncError) {
        var error = [CChar](repeating: 0, count: 256)
        guard ccurl_load(&error, error.count) == 0 else {
            throw PatchSyncError(
                .internal,
                "libcurl could not be loaded: \(String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))",
                remedy: "install libcurl4 (Debian: apt-get install libcurl4)")
        }
        guard let multi = ccurl_multi_init() else { throw PatchSyncError(.internal, "curl_multi_init failed") }
        let options = [
            (CURLMOPT_MAX_TOTAL_CONNECTIONS, settings.maxConnections),
            (CURLMOPT_MAX_HOST_CONNECTIONS, settings.maxConnectionsPerHost),
            // Keep every idle connection for reuse (the default cache shrinks with the handles in use).
            (CURLMOPT_MAXCONNECTS, settings.maxConnections)
        ]
        for (option, value) in options {
            let code = ccurl_multi_setopt_long(multi, option, value)
            guard code == CURLM_OK else {
                ccurl_multi_cleanup(multi)
                throw PatchSyncError(
                    .internal,
                    "libcurl refused curl_multi_setopt option \(option.rawValue) (CURLMcode \(code.rawValue))")
            }
        }
        self.multi = multi
        self.settings = settings
        limiter =
            settings.maxBytesPerSecond != nil || settings.adjustableRate
            ? RateLimiter(bytesPerSecond: settings.maxBytesPerSecond, yielding: settings.yieldToOtherTraffic) : nil
    }

    deinit { ccurl_multi_cleanup(multi) }

    var bytesReceived: Int64 { lock.withLock { bytesTotal } }

    func setMaxBytesPerSecond(_ bytesPerSecond: Int?) { limiter?.setCap(bytesPerSecond) }
    /// The rate the budget allows now; nil without a limiter or a cap.
    var rate: Double? { limiter.map(\.publishedRate).flatMap { $0 < RateLimiter.unlimited ? $0 : nil } }
    /// The rate the delay controller allows now; nil when not yielding.
    var yieldingRate: Double? { settings.yieldToOtherTraffic ? limiter?.publishedRate : nil }

    func submit(_ box: TransferBox) {
        lock.withLock { inbox.append(box) }
        ccurl_multi_wakeup(multi)
    }

    /// Wakes the thread so it notices cancelled transfers.
    func wake() { ccurl_multi_wakeup(multi) }

    /// Asks the thread to finish its transfers and end, and waits until it has.
    func stop() {
        lock.withLock { stopping = true }
        ccurl_multi_wakeup(multi)
        finished.wait()
    }

    // MARK: The transfer thread

    func run() {
        var active = 0
        while true {
            let (incoming, stop) = lock.withLock { () -> ([TransferBox], Bool) in
                defer { inbox.removeAll() }
                return (inbox, stopping)
            }
            for box in incoming {
                if start(box) { active += 1 }
            }
            if stop && active == 0 { break }
            var running: Int32 = 0
            ccurl_multi_perform(multi, &running)
            active -= drainCompleted()
            ccurl_multi_poll(multi, Int32(pollTimeout()))
            resumePaused()
        }
        finished.signal()
    }

    /// How long to wait for activity: until tokens are back when transfers wait for them.
    private func pollTimeout() -> Int {
        guard let limiter, limiter.hasPaused else { return 1000 }
        limiter.refill()
        return min(1000, limiter.millisecondsUntilAvailable)
    }

    /// Resumes the transfers that paused for tokens, once the budget has some again.
    private func resumePaused() {
        guard let limiter else { return }
        for box in limiter.resumable() {
            // May deliver the kept bytes at once, and pause again if they spend the budget.
            if let easy = box.currentEasy { ccurl_easy_pause(easy, ccurl_pause_cont) }
        }
    }

    /// Creates and adds the easy handle of `box`; false when it could not start (already completed):
    /// cancelled, or an option libcurl refused (``CurlOptions``), before anything was sent.
    private func start(_ box: TransferBox) -> Bool {
        if box.cancel.isSet {
            box.complete(.failure(.cancelled))
            return false
        }
        guard let easy = ccurl_easy_init() else {
            box.complete(.failure(.network("curl_easy_init failed")))
            return false
        }
        do throws(CurlOptionError) { try configure(easy, for: box) } catch {
            ccurl_easy_cleanup(easy)
            box.complete(.failure(.refused(error.libraryError().during("requesting \(box.request.url)"))))
            return false
        }
        _ = Unmanaged.passRetained(box)  // the handle's reference (CURLOPT_PRIVATE), released in finish(_:)
        box.currentEasy = easy
        // The cap is for the network: libcurl cannot pause a file:// transfer ("Write callback asked for
        // PAUSE when not supported" failed the sync), and a local file costs no bandwidth.
        box.limiter = box.request.url.lowercased().hasPrefix("file:") ? nil : limiter
        ccurl_multi_add_handle(multi, easy)
        return true
    }

    private func configure(_ easy: UnsafeMutableRawPointer, for box: TransferBox) throws(CurlOptionError) {
        let options = CurlOptions(easy: easy)
        let opaque = Unmanaged.passUnretained(box).toOpaque()  // retained by start(_:) once every option is set
        try options.set(CURLOPT_URL, box.request.url)
        try options.set(CURLOPT_PRIVATE, pointer: opaque)
        try options.set(CURLOPT_ERRORBUFFER, pointer: box.errorBuffer)
        try options.set(CURLOPT_WRITEDATA, pointer: opaque)
        try options.set(CURLOPT_WRITEFUNCTION, callback: transferWriteCallback)
        try options.set(CURLOPT_HEADERDATA, pointer: opaque)
        try options.set(CURLOPT_XFERINFODATA, pointer: opaque)
        try options.set(CURLOPT_XFERINFOFUNCTION, progress: transferProgressCallback)
        try options.set(CURLOPT_NOPROGRESS, 0)
        try options.set(CURLOPT_HEADERFUNCTION, callback: transferHeaderCallback)
        if let range = box.request.range {
            try options.set(CURLOPT_RANGE, "\(range.lowerBound)-\(range.upperBound)")
        }
        try options.allow([.http, .https, .file])
        // Redirects stay on http(s), and a request that started on https never continues over plain http.
        let https = box.request.url.lowercased().hasPrefix("https://")
        try options.allow(https ? [.https] : [.http, .https], redirects: true)
        try options.set(CURLOPT_FOLLOWLOCATION, settings.followRedirects && box.request.followRedirects ? 1 : 0)
        try options.set(CURLOPT_MAXREDIRS, 5)
        // A LAN peer closes a connection idle for 2 s (its places are few): never send it a request on
        // one idle for 1 s or more, which it may be closing as the request goes (an empty reply).
        if !box.request.fromOrigin { try options.set(CURLOPT_MAXAGE_CONN, 1) }
        try options.secureDefaults(
            caFile: settings.caFile, connectTimeout: settings.connectTimeoutSeconds,
            lowSpeedBytes: settings.lowSpeedBytes, lowSpeedSeconds: settings.lowSpeedSeconds)
        // The caller's deadline (what is left of a metadata refresh), within the request's own.
        let timeout = min(box.request.timeout ?? .infinity, settings.deadline(forBytes: box.request.maxBytes))
        try options.set(CURLOPT_TIMEOUT_MS, max(1, Int(timeout * 1000)))
        try options.set(CURLOPT_BUFFERSIZE, settings.bufferSize)
        try options.set(CURLOPT_TCP_KEEPALIVE, 1)
        try options.set(CURLOPT_PIPEWAIT, 1)
    }

    /// Completes every finished transfer; returns how many there were.
    private func drainCompleted() -> Int {
        var count = 0
        var left: Int32 = 0
        while let message = ccurl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            finish(easy, code: code)
            count += 1
        }
        return count
    }

    private func finish(_ easy: UnsafeMutableRawPointer, code: CURLcode) {
        var pointer: UnsafeMutableRawPointer?
        ccurl_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &pointer)
        ccurl_multi_remove_handle(multi, easy)
        guard let pointer else {
            ccurl_easy_cleanup(easy)
            return
        }
        let box = Unmanaged<TransferBox>.fromOpaque(pointer).takeRetainedValue()
        box.currentEasy = nil
        limiter?.forget(box)
        if box.request.fromOrigin { lock.withLock { bytesTotal += box.arrived } }
        box.complete(outcome(of: box, easy: easy, code: code))
        ccurl_easy_cleanup(easy)
    }

    private func outcome(
        of box: TransferBox, easy: UnsafeMutableRawPointer,
        code: CURLcode
    ) -> Result<TransferResponse, TransferFailure> {
        if let failure = box.failure { return .failure(failure) }
        if box.cancel.isSet { return .failure(.cancelled) }
        if code != CURLE_OK && !box.satisfied {
            if code == CURLE_FILE_COULDNT_READ_FILE { return .failure(.notFound) }
            let text =
                box.curlMessage ?? ccurl_easy_strerror(code).map { String(cString: $0) }
                ?? "libcurl error \(code.rawValue)"
            if code == CURLE_PEER_FAILED_VERIFICATION { return .failure(.untrusted(text)) }
            if code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST
                || code == CURLE_COULDNT_RESOLVE_PROXY
                || (code == CURLE_OPERATION_TIMEDOUT && Self.neverConnected(easy))
            {
                return .failure(.unreachable(text))
            }
            return .failure(.network(text))
        }
        if !box.checkedStatus, let failure = box.checkStatus(easy) { return .failure(failure) }
        if let range = box.request.range, box.received != range.upperBound - range.lowerBound + 1 {
            return .failure(.wrongRange("asked \(range.lowerBound)-\(range.upperBound), got \(box.received) bytes"))
        }
        return .success(TransferResponse(status: box.status, bytes: box.received, headers: box.headers))
    }

    /// Whether the transfer ended before any connection was made (CURLINFO_CONNECT_TIME_T still zero):
    /// a connect that timed out, as one to a dropped SYN does (a Wi-Fi blink, a blackholed address), is
    /// as unreachable as a refused one.
    private static func neverConnected(_ easy: UnsafeMutableRawPointer) -> Bool {
        var connected: curl_off_t = 0
        return ccurl_easy_getinfo_off_t(easy, CURLINFO_CONNECT_TIME_T, &connected) == CURLE_OK && connected == 0
    }
}

/// libcurl's write callback: checks the status once, bounds the body, feeds the sink.
/// Never throws: a failure is recorded on the box and a short count aborts the transfer.
private let transferWriteCallback: ccurl_data_callback = { data, size, count, userdata in
    guard let userdata, let data else { return 0 }
    let box = Unmanaged<TransferBox>.fromOpaque(userdata).takeUnretainedValue()
    switch box.write(UnsafeRawBufferPointer(start: data, count: size * count)) {
    case .accepted: return size * count
    case .pause: return ccurl_writefunc_pause
    case .stop: return 0
    }
}

/// libcurl's progress callback, called at least once a second even when a transfer stalls:
/// a non-zero return aborts a transfer whose caller was cancelled.
private let transferProgressCallback: ccurl_xferinfo_callback = { userdata, _, _, _, _ in
    guard let userdata else { return 0 }
    return Unmanaged<TransferBox>.fromOpaque(userdata).takeUnretainedValue().cancel.isSet ? 1 : 0
}

/// libcurl's header callback: remembers Content-Range of the final response.
private let transferHeaderCallback: ccurl_data_callback = { data, size, count, userdata in
    guard let userdata, let data else { return 0 }
    let box = Unmanaged<TransferBox>.fromOpaque(userdata).takeUnretainedValue()
    box.header(String(decoding: UnsafeRawBufferPointer(start: data, count: size * count), as: UTF8.self))
    return size * count
}
