internal import CCurl
import Foundation

/// One connection to a bucket: a libcurl easy handle that signs each request with AWS SigV4
/// (`CURLOPT_AWS_SIGV4`) and keeps its connection alive between requests.
///
/// Thread-safety: none; an uploader's worker owns one and uses it from its own thread only. Requests
/// are blocking (`curl_easy_perform`): the upload's parallelism is its workers'.
final class S3Connection {
    /// A response: its status and (up to a limit) its body.
    struct Response {
        var status: Int
        var body: Data
    }

    private let bucket: S3Bucket
    private let easy: UnsafeMutableRawPointer
    /// Attempts of one request before it fails (network errors, 5xx, 429), with backoff between them.
    static let attempts = 5

    init(_ bucket: S3Bucket) throws(PatchSyncError) {
        var error = [CChar](repeating: 0, count: 256)
        guard ccurl_load(&error, error.count) == 0, let easy = ccurl_easy_init() else {
            throw PatchSyncError(.internal, "libcurl could not be loaded", remedy: "install libcurl4 (Debian: apt-get install libcurl4)")
        }
        self.bucket = bucket
        self.easy = easy
    }

    deinit { ccurl_easy_cleanup(easy) }

    /// PUT of the file `local` as `path`, with its Cache-Control and Content-Type.
    func put(_ path: String, from local: String, cacheControl: String, contentType: String) throws(PatchSyncError) {
        let response = try send("PUT", path, headers: ["Cache-Control: " + cacheControl, "Content-Type: " + contentType],
                                upload: local)
        guard (200..<300).contains(response.status) else { throw refusal("uploading", path, response) }
    }

    /// GET of `path`: its bytes, nil when the bucket has no such key.
    func get(_ path: String, limit: Int) throws(PatchSyncError) -> Data? {
        let response = try send("GET", path, limit: limit)
        if response.status == 404 { return nil }
        guard response.status == 200 else { throw refusal("reading", path, response) }
        return response.body
    }

    /// HEAD of `path`: whether the bucket has it.
    func exists(_ path: String) throws(PatchSyncError) -> Bool {
        let response = try send("HEAD", path)
        if response.status == 404 { return false }
        guard response.status == 200 else { throw refusal("looking for", path, response) }
        return true
    }

    /// DELETE of `path` (S3 answers 204 whether it was there or not).
    func delete(_ path: String) throws(PatchSyncError) {
        let response = try send("DELETE", path)
        guard (200..<300).contains(response.status) || response.status == 404 else { throw refusal("deleting", path, response) }
    }

    /// One request, retried after network errors, 5xx and 429 with exponential backoff and full jitter.
    private func send(_ method: String, _ path: String, headers: [String] = [], upload: String? = nil,
                      limit: Int = 64 << 10) throws(PatchSyncError) -> Response {
        var last: PatchSyncError?
        for attempt in 1...Self.attempts {
            if attempt > 1 {
                Thread.sleep(forTimeInterval: Double.random(in: 0...min(RetryPolicy.cap, RetryPolicy.base * pow(2, Double(attempt - 1)))))
            }
            do {
                let response = try perform(method, path, headers: headers, upload: upload, limit: limit)
                if response.status >= 500 || response.status == 429 {
                    last = refusal(method == "PUT" ? "uploading" : "asking for", path, response)
                    continue
                }
                return response
            } catch where error.code == .originUnavailable {
                last = error
            }
        }
        throw last ?? PatchSyncError(.internal, "no attempt was made for \(path)")
    }

    private func perform(_ method: String, _ path: String, headers: [String], upload: String?,
                         limit: Int) throws(PatchSyncError) -> Response {
        let exchange = S3Exchange(limit: limit)
        var file: FileDescriptor?
        if let upload {
            do { file = try FileDescriptor(path: upload, flags: O_RDONLY) } catch {
                throw PatchSyncError.wrap(error).during("uploading \(upload)")
            }
            exchange.source = file
        }
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
        ccurl_easy_setopt_string(easy, CURLOPT_URL, bucket.url(path))
        ccurl_easy_setopt_string(easy, CURLOPT_AWS_SIGV4, "aws:amz:\(bucket.region):s3")
        ccurl_easy_setopt_string(easy, CURLOPT_USERNAME, bucket.credentials.accessKeyId)
        ccurl_easy_setopt_string(easy, CURLOPT_PASSWORD, bucket.credentials.secretAccessKey)
        ccurl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, list)
        ccurl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, opaque)
        ccurl_easy_setopt_callback(easy, CURLOPT_WRITEFUNCTION, s3WriteCallback)
        ccurl_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https")
        ccurl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        ccurl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1)
        ccurl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2)
        if let ca = bucket.caFile { ccurl_easy_setopt_string(easy, CURLOPT_CAINFO, ca) }
        ccurl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT, 30)
        ccurl_easy_setopt_long(easy, CURLOPT_LOW_SPEED_LIMIT, 1024)
        ccurl_easy_setopt_long(easy, CURLOPT_LOW_SPEED_TIME, 60)
        ccurl_easy_setopt_string(easy, CURLOPT_USERAGENT, "PatchSync/0.1")
        switch method {
        case "PUT":
            guard let file else { throw PatchSyncError(.internal, "a PUT without a file") }
            let size: Int64
            do { size = Int64(try file.status().st_size) } catch { throw PatchSyncError.wrap(error) }
            ccurl_easy_setopt_long(easy, CURLOPT_UPLOAD, 1)
            ccurl_easy_setopt_off_t(easy, CURLOPT_INFILESIZE_LARGE, curl_off_t(size))
            ccurl_easy_setopt_pointer(easy, CURLOPT_READDATA, opaque)
            ccurl_easy_setopt_callback(easy, CURLOPT_READFUNCTION, s3ReadCallback)
        case "HEAD": ccurl_easy_setopt_long(easy, CURLOPT_NOBODY, 1)
        case "GET": break
        default: ccurl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)
        }
        let code = ccurl_easy_perform(easy)
        if let failure = exchange.failure { throw failure }
        guard code == CURLE_OK else {
            throw PatchSyncError(.originUnavailable, "\(method) \(bucket.url(path)): \(String(cString: ccurl_easy_strerror(code)))",
                                 remedy: "check --endpoint and the network; run the command again, it continues where it stopped")
        }
        var status = 0
        ccurl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        return Response(status: status, body: exchange.body)
    }

    /// The error for a response S3 refused, with the code and message of its XML error body.
    private func refusal(_ doing: String, _ path: String, _ response: Response) -> PatchSyncError {
        let text = String(decoding: response.body.prefix(4096), as: UTF8.self)
        func element(_ name: String) -> String? {
            guard let start = text.range(of: "<\(name)>"), let end = text.range(of: "</\(name)>", range: start.upperBound..<text.endIndex)
            else { return nil }
            return String(text[start.upperBound..<end.lowerBound])
        }
        let what = [element("Code"), element("Message")].compactMap { $0 }.joined(separator: ": ")
        let detail = "\(doing) \(bucket.url(path)): HTTP \(response.status)" + (what.isEmpty ? "" : " (\(what))")
        switch response.status {
        case 401, 403:
            return PatchSyncError(.usage, detail, remedy: "check the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or "
                                  + "~/.aws/credentials), --region, and that they may read, write and delete in s3://\(bucket.bucket) "
                                  + "(s3:GetObject, s3:PutObject, s3:DeleteObject, and s3:ListBucket, without which S3 answers "
                                  + "403 instead of 404 for a key it lacks)")
        case 500..., 429:
            return PatchSyncError(.originUnavailable, detail, remedy: "the store failed; run the command again, it continues where it stopped")
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
    var offset: Int64 = 0
    var failure: PatchSyncError?

    init(limit: Int) { self.limit = limit }
}

/// libcurl's write callback: keeps the response body up to its limit (error bodies and metadata).
private let s3WriteCallback: ccurl_data_callback = { data, size, count, userdata in
    guard let userdata, let data else { return 0 }
    let exchange = Unmanaged<S3Exchange>.fromOpaque(userdata).takeUnretainedValue()
    let room = max(0, exchange.limit - exchange.body.count)
    exchange.body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: min(room, size * count))
    guard size * count <= room else {
        exchange.failure = PatchSyncError(.refusedData, "the store answered with more than \(exchange.limit) bytes",
                                          remedy: "check --endpoint: it should be an S3-compatible store")
        return 0
    }
    return size * count
}

/// libcurl's read callback: the next bytes of the file being uploaded (pread, so a retry starts over).
private let s3ReadCallback: ccurl_data_callback = { data, size, count, userdata in
    guard let userdata, let data else { return 0 }
    let exchange = Unmanaged<S3Exchange>.fromOpaque(userdata).takeUnretainedValue()
    guard let source = exchange.source else { return 0 }
    let read = pread(source.fd, data, size * count, off_t(exchange.offset))
    guard read >= 0 else {
        exchange.failure = PatchSyncError.wrap(Errno(errno, "reading", "the file being uploaded"))
        return size_t(CURL_READFUNC_ABORT)
    }
    exchange.offset += Int64(read)
    return size_t(read)
}
