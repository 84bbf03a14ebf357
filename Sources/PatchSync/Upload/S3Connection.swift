internal import CCurl
import Foundation

/// One connection to a bucket: a libcurl easy handle that signs each request with AWS SigV4
/// (`CURLOPT_AWS_SIGV4`) and keeps its connection alive between requests.
///
/// Each request runs under ``RetryPolicy``, the policy the downloads use (``withRetries(_:attempts:clock:_:)``).
///
/// Thread-safety: none; an uploader's worker owns one and uses it from its own thread only. Requests
/// are blocking (`curl_easy_perform`): the upload's parallelism is its workers'.
final class S3Connection {
    /// A response: its status and (up to a limit) its body.
    struct Response {
        var status: Int
        var body: Data
        /// The response's ETag header, quotes and all (what `If-Match` takes back).
        var etag: String? = nil
        /// The store's clock when it answered (`Date`) and the object's `Last-Modified`.
        var date: Date? = nil
        var lastModified: Date? = nil
    }

    /// A conditional write's precondition: `If-None-Match: *` (create only) or `If-Match: ETAG` (replace
    /// only the version read).
    enum Precondition: Sendable, Equatable {
        case absent
        case matching(String)

        var header: String {
            switch self {
            case .absent: "If-None-Match: *"
            case .matching(let etag): "If-Match: " + etag
            }
        }
    }

    private let bucket: S3Bucket
    private let easy: UnsafeMutableRawPointer
    /// What the retries read the time and jitter from, and wait on.
    private let clock: RetryClock
    /// Failures in a row of one request (a failure to connect, a timeout, 5xx, 429, 408) after which it
    /// fails: the failure streak of its ``RetryPolicy``, which waits its backoff between them.
    static let attempts = 5

    /// Refuses, before any request, a libcurl that cannot sign with SigV4 (``requireSigV4(libcurl:version:)``).
    /// `clock`: the time, jitter and wait of the retries (a test's, so that nothing sleeps).
    init(_ bucket: S3Bucket, clock: RetryClock = .system) throws(PatchSyncError) {
        var error = [CChar](repeating: 0, count: 256)
        guard ccurl_load(&error, error.count) == 0 else {
            throw PatchSyncError(
                .internal, "libcurl could not be loaded", remedy: "install libcurl4 (Debian: apt-get install libcurl4)")
        }
        let loaded = LoadedCurl.release
        try Self.requireSigV4(libcurl: loaded.number, version: loaded.text)
        guard let easy = ccurl_easy_init() else { throw PatchSyncError(.internal, "curl_easy_init failed") }
        self.bucket = bucket
        self.easy = easy
        self.clock = clock
    }

    /// The first libcurl release with CURLOPT_AWS_SIGV4, as libcurl numbers releases (7.75.0).
    static let sigV4Release: UInt32 = 0x07_4B_00

    /// Refuses a libcurl older than 7.75.0 (its number `number`, its text `version`) with 69: it does not
    /// know CURLOPT_AWS_SIGV4, and would send every request unsigned, with the access key and secret as
    /// HTTP Basic authorization.
    static func requireSigV4(libcurl number: UInt32, version: String) throws(PatchSyncError) {
        guard number >= sigV4Release else {
            throw CurlOptionError(option: CURLOPT_AWS_SIGV4.rawValue, code: CURLE_UNKNOWN_OPTION.rawValue)
                .libraryError(libcurl: version).during("signing S3 requests with AWS SigV4")
        }
    }

    deinit { ccurl_easy_cleanup(easy) }

    /// PUT of the file `local` as `path`, with its Cache-Control and Content-Type.
    func put(_ path: String, from local: String, cacheControl: String, contentType: String) throws(PatchSyncError) {
        let response = try send(
            "PUT", path, headers: ["Cache-Control: " + cacheControl, "Content-Type: " + contentType],
            upload: local)
        guard (200..<300).contains(response.status) else { throw refusal("uploading", bucket.url(path), response) }
    }

    /// GET of `path`: its bytes, nil when the bucket has no such key.
    func get(_ path: String, limit: Int) throws(PatchSyncError) -> Data? {
        try getTagged(path, limit: limit)?.body
    }

    /// GET of `path`: its bytes and ETag, nil when the bucket has no such key.
    func getTagged(_ path: String, limit: Int) throws(PatchSyncError) -> (body: Data, etag: String?)? {
        try getWithAge(path, limit: limit).map { ($0.body, $0.etag) }
    }

    /// GET of `path`: its bytes, ETag and age by the store's own clock (its `Date` less the object's
    /// `Last-Modified`, to the second; nil when either header is missing); nil when there is no such key.
    func getWithAge(_ path: String, limit: Int) throws(PatchSyncError) -> (
        body: Data, etag: String?, age: TimeInterval?
    )? {
        let response = try send("GET", path, limit: limit)
        if response.status == 404 { return nil }
        guard response.status == 200 else { throw refusal("reading", bucket.url(path), response) }
        let age = response.date.flatMap { date in response.lastModified.map { date.timeIntervalSince($0) } }
        return (response.body, response.etag, age)
    }

    /// GET of `path` into the file `local` (created or truncated): its size in bytes and its ETag; nil
    /// when the bucket has no such key.
    func download(_ path: String, to local: String) throws(PatchSyncError) -> (bytes: Int64, etag: String?)? {
        let response = try send("GET", path, sink: local)
        if response.status == 404 { return nil }
        guard response.status == 200 else { throw refusal("downloading", bucket.url(path), response) }
        return (Int64(response.body.count), response.etag)
    }

    /// ``put(_:body:from:cacheControl:contentType:when:)``, where a failed precondition is still success
    /// when the key now holds these very bytes (an earlier attempt of the request landed and its answer
    /// was lost): the ETag in the bucket, or nil when it holds something else.
    func putOrFind(
        _ path: String, body: Data? = nil, from local: String? = nil, cacheControl: String, contentType: String,
        when condition: Precondition
    ) throws(PatchSyncError) -> String? {
        if let etag = try put(
            path, body: body, from: local, cacheControl: cacheControl, contentType: contentType, when: condition)
        {
            return etag
        }
        if let body {
            guard let (now, etag) = try getTagged(path, limit: max(64 << 10, body.count + 1)), now == body else {
                return nil
            }
            return etag ?? ""
        }
        guard let local else { return nil }
        let theirs = local + ".theirs-\(getpid())"
        defer { try? FileSystem.remove(theirs) }
        guard let (_, etag) = try download(path, to: theirs),
            (try? SHA256Hasher.hash(file: theirs)) == (try? SHA256Hasher.hash(file: local))
        else { return nil }
        return etag ?? ""
    }

    /// A conditional PUT of `body` (or the file `local`) as `path`: the new ETag, or nil when the
    /// precondition failed (412: the key exists, or holds another version than the one read; 409: a
    /// conditional write raced another on the same key).
    func put(
        _ path: String, body: Data? = nil, from local: String? = nil, cacheControl: String, contentType: String,
        when condition: Precondition
    ) throws(PatchSyncError) -> String? {
        let response = try send(
            "PUT", path,
            headers: ["Cache-Control: " + cacheControl, "Content-Type: " + contentType, condition.header],
            upload: local, uploadData: body)
        // 412: the precondition failed; 409: a conditional write raced another; 404: If-Match on a key
        // that is gone.
        if response.status == 412 || response.status == 409 || (response.status == 404 && condition != .absent) {
            return nil
        }
        guard (200..<300).contains(response.status) else { throw refusal("uploading", bucket.url(path), response) }
        return response.etag ?? ""
    }

    /// HEAD of `path`: whether the bucket has it.
    func exists(_ path: String) throws(PatchSyncError) -> Bool {
        let response = try send("HEAD", path)
        if response.status == 404 { return false }
        guard response.status == 200 else { throw refusal("looking for", bucket.url(path), response) }
        return true
    }

    /// DELETE of `path` (S3 answers 204 whether it was there or not).
    func delete(_ path: String) throws(PatchSyncError) {
        let response = try send("DELETE", path)
        guard (200..<300).contains(response.status) || response.status == 404 else {
            throw refusal("deleting", bucket.url(path), response)
        }
    }

    /// The keys under the origin's prefix, each relative to it (``S3Bucket/path(ofKey:)``), with its size
    /// and ETag: ListObjectsV2, page by page (up to 1,000 keys a request, each counted in `requests`).
    /// Needs s3:ListBucket.
    func list(requests: inout Int) throws(PatchSyncError) -> [String: ListedObject] {
        var listed: [String: ListedObject] = [:]
        var token: String?
        repeat {
            let url = bucket.listURL(continuation: token)
            let response = try send("GET", url: url, limit: 16 << 20)
            requests += 1
            guard response.status == 200 else { throw refusal("listing", url, response) }
            let page = try S3Listing(parsing: response.body, from: url)
            for (key, size, etag, modified) in page.objects {
                if let path = bucket.path(ofKey: key) {
                    listed[path] = ListedObject(size: size, etag: etag, modified: modified)
                }
            }
            if let next = page.next, next == token {
                throw PatchSyncError(
                    .refusedData, "\(url) answered the same continuation token again",
                    remedy: "check --endpoint: it should be an S3-compatible store that pages ListObjectsV2")
            }
            token = page.next
        } while token != nil
        return listed
    }

    /// One request for the object `path`, as ``send(_:url:headers:upload:limit:)`` sends it.
    private func send(
        _ method: String, _ path: String, headers: [String] = [], upload: String? = nil, uploadData: Data? = nil,
        sink: String? = nil, limit: Int = 64 << 10
    ) throws(PatchSyncError) -> Response {
        try send(
            method, url: bucket.url(path), headers: headers, upload: upload, uploadData: uploadData, sink: sink,
            limit: limit)
    }

    /// One request, retried as ``withRetries(_:attempts:clock:_:)`` decides: after a failure to connect
    /// or a timeout, 5xx, 429 and 408. Anything thrown (an option libcurl refused, a local error) ends it
    /// at once. Returns the last answer whatever its status: the caller refuses what it cannot use.
    private func send(
        _ method: String, url: String, headers: [String] = [], upload: String? = nil, uploadData: Data? = nil,
        sink: String? = nil, limit: Int = 64 << 10
    ) throws(PatchSyncError) -> Response {
        try Self.withRetries("\(method) \(url)", clock: clock) { () throws(PatchSyncError) -> Attempt in
            try perform(
                method, url, headers: headers, body: Body(file: upload, data: uploadData, sink: sink), limit: limit)
        }
    }

    /// What one request sends and where its answer goes: a file or bytes to upload, a file to write a
    /// 200's body into.
    private struct Body {
        var file: String?
        var data: Data?
        var sink: String?
    }

    /// One attempt: the store's answer, or the failure before one (for the policy to judge); throws
    /// what retrying cannot help.
    private func perform(
        _ method: String, _ url: String, headers: [String], body: Body,
        limit: Int
    ) throws(PatchSyncError) -> Attempt {
        let exchange = S3Exchange(limit: limit)
        var size: Int64?
        if let upload = body.file {
            do {
                let file = try FileDescriptor(path: upload, flags: O_RDONLY)
                size = Int64(try file.status().st_size)
                exchange.source = file
            } catch { throw PatchSyncError.wrap(error).during("uploading \(upload)") }
        } else if let data = body.data {
            size = Int64(data.count)
            exchange.sourceData = data
        }
        if let sink = body.sink {
            do {
                exchange.sink = try FileDescriptor(path: sink, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: 0o644)
            } catch {
                throw PatchSyncError.wrap(error).during("downloading into \(sink)")
            }
        }
        if method == "PUT" && size == nil { throw PatchSyncError(.internal, "a PUT without a file") }
        var list: UnsafeMutablePointer<curl_slist>?
        // Without it libcurl 7.88 signs an empty payload's hash, which S3 refuses; the body itself
        // is covered by TLS (and every object by its SHA-256 name).
        var all = headers + ["x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        if let token = bucket.credentials.sessionToken { all.append("x-amz-security-token: " + token) }
        for header in all { list = ccurl_slist_append(list, header) }
        defer { ccurl_slist_free_all(list) }
        let opaque = Unmanaged.passRetained(exchange).toOpaque()
        defer { Unmanaged<S3Exchange>.fromOpaque(opaque).release() }
        ccurl_easy_reset(easy)
        do throws(CurlOptionError) {
            try configure(method, url, headers: list, exchange: opaque, uploading: size ?? 0)
        } catch {
            throw error.libraryError().during("\(method) \(url)")
        }
        let code = ccurl_easy_perform(easy)
        if let failure = exchange.failure { throw failure }
        guard code == CURLE_OK else {
            let reason = ccurl_easy_strerror(code).map { String(cString: $0) } ?? "libcurl error \(code.rawValue)"
            let error = PatchSyncError(
                .originUnavailable, "\(method) \(url): \(reason)",
                remedy: "check --endpoint and the network; run the command again, it continues where it stopped")
            return .failed(code == CURLE_PEER_FAILED_VERIFICATION ? .untrusted(reason) : .network(reason), error)
        }
        var status = 0
        ccurl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        if exchange.sink != nil, status == 200 {
            return .answered(Response(status: status, body: Data(count: Int(exchange.written)), etag: exchange.etag))
        }
        return .answered(
            Response(
                status: status, body: exchange.body, etag: exchange.etag, date: exchange.date,
                lastModified: exchange.lastModified))
    }

    /// Sets the request's options, SigV4 before the credentials: a libcurl that refuses one (too old for
    /// CURLOPT_AWS_SIGV4, say) ends the request before it is sent (``CurlOptions``). A PUT sends `size` bytes.
    private func configure(
        _ method: String, _ url: String, headers list: UnsafeMutablePointer<curl_slist>?,
        exchange opaque: UnsafeMutableRawPointer, uploading size: Int64
    ) throws(CurlOptionError) {
        let options = CurlOptions(easy: easy)
        try options.set(CURLOPT_URL, url)
        try options.set(CURLOPT_AWS_SIGV4, "aws:amz:\(bucket.region):s3")
        try options.set(CURLOPT_USERNAME, bucket.credentials.accessKeyId)
        try options.set(CURLOPT_PASSWORD, bucket.credentials.secretAccessKey)
        try options.set(CURLOPT_HTTPHEADER, list: list)
        try options.set(CURLOPT_WRITEDATA, pointer: opaque)
        try options.set(CURLOPT_WRITEFUNCTION, callback: s3WriteCallback)
        try options.set(CURLOPT_HEADERDATA, pointer: opaque)
        try options.set(CURLOPT_HEADERFUNCTION, callback: s3HeaderCallback)
        try options.allow([.http, .https])
        try options.secureDefaults(caFile: bucket.caFile, connectTimeout: 30, lowSpeedBytes: 1024, lowSpeedSeconds: 60)
        switch method {
        case "PUT":
            try options.set(CURLOPT_UPLOAD, 1)
            try options.set(CURLOPT_INFILESIZE_LARGE, size: size)
            try options.set(CURLOPT_READDATA, pointer: opaque)
            try options.set(CURLOPT_READFUNCTION, callback: s3ReadCallback)
        case "HEAD": try options.set(CURLOPT_NOBODY, 1)
        case "GET": break
        default: try options.set(CURLOPT_CUSTOMREQUEST, method)
        }
    }

    /// The error for a response S3 refused to the request for `url`, with the code and message of its
    /// XML error body.
    private func refusal(_ doing: String, _ url: String, _ response: Response) -> PatchSyncError {
        let text = String(decoding: response.body.prefix(4096), as: UTF8.self)
        func element(_ name: String) -> String? {
            guard let start = text.range(of: "<\(name)>"),
                let end = text.range(of: "</\(name)>", range: start.upperBound..<text.endIndex)
            else { return nil }
            return String(text[start.upperBound..<end.lowerBound])
        }
        let what = [element("Code"), element("Message")].compactMap { $0 }.joined(separator: ": ")
        let detail = "\(doing) \(url): HTTP \(response.status)" + (what.isEmpty ? "" : " (\(what))")
        switch response.status {
        case 401, 403:
            return PatchSyncError(
                .usage, detail,
                remedy: "check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or "
                    + "~/.aws/credentials), --region, and that they may read, write and delete in s3://\(bucket.bucket) "
                    + "(s3:GetObject, s3:PutObject, s3:DeleteObject, and s3:ListBucket, without which S3 answers "
                    + "403 instead of 404 for a key it lacks)")
        case 500..., 429, 408:
            return PatchSyncError(
                .originUnavailable, detail,
                remedy: "the store failed; run the command again, it continues where it stopped")
        default:
            return PatchSyncError(.refusedData, detail, remedy: "check the bucket name, --endpoint and --region")
        }
    }
}

/// What libcurl's callbacks of one S3 request share with it: the file being uploaded and the response
/// body, bounded. Thread-safety: used by the one thread that performs the request.
private final class S3Exchange {
    let limit: Int
    var body = Data()
    var source: FileDescriptor?
    var sourceData: Data?
    var offset: Int64 = 0
    var failure: PatchSyncError?
    /// Where a 200's body goes instead of `body` (a download), and how many bytes it took.
    var sink: FileDescriptor?
    var written: Int64 = 0
    var status = 0
    var etag: String?
    var date: Date?
    var lastModified: Date?

    init(limit: Int) { self.limit = limit }
}

/// libcurl's header callback: the status line and the ETag.
private let s3HeaderCallback: ccurl_data_callback = { data, size, count, userdata in
    guard let userdata, let data else { return 0 }
    let exchange = Unmanaged<S3Exchange>.fromOpaque(userdata).takeUnretainedValue()
    let line = String(decoding: UnsafeRawBufferPointer(start: data, count: size * count), as: UTF8.self)
        .trimmingCharacters(in: .whitespacesAndNewlines)
    if line.hasPrefix("HTTP/") {
        exchange.status = line.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
        exchange.etag = nil
    } else if line.lowercased().hasPrefix("etag:") {
        exchange.etag = line.dropFirst(5).trimmingCharacters(in: .whitespaces)
    } else if line.lowercased().hasPrefix("date:") {
        exchange.date = TransferBox.httpDate(line.dropFirst(5).trimmingCharacters(in: .whitespaces))
    } else if line.lowercased().hasPrefix("last-modified:") {
        exchange.lastModified = TransferBox.httpDate(line.dropFirst(14).trimmingCharacters(in: .whitespaces))
    }
    return size * count
}

/// libcurl's write callback: keeps the response body up to its limit (error bodies and metadata), or
/// writes a 200's body into the download's file.
private let s3WriteCallback: ccurl_data_callback = { data, size, count, userdata in
    guard let userdata, let data else { return 0 }
    let exchange = Unmanaged<S3Exchange>.fromOpaque(userdata).takeUnretainedValue()
    if let sink = exchange.sink, exchange.status == 200 {
        var done = 0
        while done < size * count {
            let wrote = write(sink.fd, UnsafeRawPointer(data) + done, size * count - done)
            guard wrote > 0 else {
                exchange.failure = PatchSyncError.wrap(Errno(errno, "writing", "a downloaded object"))
                return 0
            }
            done += wrote
        }
        exchange.written += Int64(done)
        return done
    }
    let room = max(0, exchange.limit - exchange.body.count)
    exchange.body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: min(room, size * count))
    guard size * count <= room else {
        exchange.failure = PatchSyncError(
            .refusedData, "the store answered with more than \(exchange.limit) bytes",
            remedy: "check --endpoint: it should be an S3-compatible store")
        return 0
    }
    return size * count
}

/// libcurl's read callback: the next bytes of the file being uploaded (pread, so a retry starts over).
private let s3ReadCallback: ccurl_data_callback = { data, size, count, userdata in
    guard let userdata, let data else { return 0 }
    let exchange = Unmanaged<S3Exchange>.fromOpaque(userdata).takeUnretainedValue()
    if let bytes = exchange.sourceData {
        let start = Int(exchange.offset), n = min(size * count, bytes.count - start)
        guard n > 0 else { return 0 }
        bytes.withUnsafeBytes { source in
            guard let base = source.baseAddress else { return }
            UnsafeMutableRawPointer(data).copyMemory(from: base + start, byteCount: n)
        }
        exchange.offset += Int64(n)
        return n
    }
    guard let source = exchange.source else { return 0 }
    let read = pread(source.fd, data, size * count, off_t(exchange.offset))
    guard read >= 0 else {
        exchange.failure = PatchSyncError.wrap(Errno(errno, "reading", "the file being uploaded"))
        return size_t(CURL_READFUNC_ABORT)
    }
    exchange.offset += Int64(read)
    return size_t(read)
}
