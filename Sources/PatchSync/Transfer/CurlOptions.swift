internal import CCurl
import Foundation

/// The options of one libcurl easy handle, set through CCurl's typed curl_easy_setopt wrappers with
/// every result checked.
///
/// libcurl answers an option it does not know (one added after the release loaded: CURLOPT_AWS_SIGV4
/// before 7.75.0) or was built without with an error code, and
/// performs the request all the same, without it: an S3 request unsigned, its access key and secret
/// sent as Basic authorization; a download free to follow a redirect to any protocol. So a refused
/// option ends the request before anything is sent.
///
/// Thread-safety: a view of the handle, used only by the thread that owns it.
struct CurlOptions {
    let easy: UnsafeMutableRawPointer

    /// The security defaults every PatchSync request is sent with, to the origin, a peer or a bucket: no
    /// signals (threads), peers and hosts verified against `caFile` or the system's store, connections
    /// that give up when they stall, and PatchSync's User-Agent.
    func secureDefaults(caFile: String?, connectTimeout: Int, lowSpeedBytes: Int, lowSpeedSeconds: Int)
        throws(CurlOptionError)
    {
        try set(CURLOPT_NOSIGNAL, 1)
        try set(CURLOPT_SSL_VERIFYPEER, 1)
        try set(CURLOPT_SSL_VERIFYHOST, 2)
        if let caFile { try set(CURLOPT_CAINFO, caFile) }
        try set(CURLOPT_CONNECTTIMEOUT, connectTimeout)
        try set(CURLOPT_LOW_SPEED_LIMIT, lowSpeedBytes)
        try set(CURLOPT_LOW_SPEED_TIME, lowSpeedSeconds)
        try set(CURLOPT_USERAGENT, PatchSyncVersion.userAgent)
    }

    /// curl_easy_setopt with a long.
    func set(_ option: CURLoption, _ value: Int) throws(CurlOptionError) {
        try Self.check(ccurl_easy_setopt_long(easy, option, value), option)
    }

    /// curl_easy_setopt with a string (libcurl copies it).
    func set(_ option: CURLoption, _ value: String) throws(CurlOptionError) {
        try Self.check(ccurl_easy_setopt_string(easy, option, value), option)
    }

    /// The protocols the transfer (or, with `redirects`, its redirects) may use: by name where libcurl
    /// knows CURLOPT_PROTOCOLS_STR (7.85.0), by bitmask on older releases (CCurl picks).
    func allow(_ protocols: [CurlProtocol], redirects: Bool = false) throws(CurlOptionError) {
        let names = protocols.map(\.rawValue).joined(separator: ",")
        let bitmask = protocols.reduce(0) { $0 | $1.bit }
        try Self.check(
            ccurl_easy_set_protocols(easy, redirects ? 1 : 0, names, bitmask),
            redirects ? CURLOPT_REDIR_PROTOCOLS_STR : CURLOPT_PROTOCOLS_STR)
    }

    /// curl_easy_setopt with a pointer (PRIVATE, WRITEDATA, ERRORBUFFER…).
    func set(_ option: CURLoption, pointer value: UnsafeMutableRawPointer?) throws(CurlOptionError) {
        try Self.check(ccurl_easy_setopt_pointer(easy, option, value), option)
    }

    /// curl_easy_setopt with a data callback (WRITEFUNCTION, HEADERFUNCTION, READFUNCTION).
    func set(_ option: CURLoption, callback: ccurl_data_callback) throws(CurlOptionError) {
        try Self.check(ccurl_easy_setopt_callback(easy, option, callback), option)
    }

    /// curl_easy_setopt with a progress callback (XFERINFOFUNCTION).
    func set(_ option: CURLoption, progress: ccurl_xferinfo_callback) throws(CurlOptionError) {
        try Self.check(ccurl_easy_setopt_xferinfo(easy, option, progress), option)
    }

    /// curl_easy_setopt with a curl_off_t (INFILESIZE_LARGE).
    func set(_ option: CURLoption, size: Int64) throws(CurlOptionError) {
        try Self.check(ccurl_easy_setopt_off_t(easy, option, curl_off_t(size)), option)
    }

    /// curl_easy_setopt with a header list (HTTPHEADER); the list must outlive the transfer.
    func set(_ option: CURLoption, list: UnsafeMutablePointer<curl_slist>?) throws(CurlOptionError) {
        try Self.check(ccurl_easy_setopt_slist(easy, option, list), option)
    }

    /// Throws when curl_easy_setopt did not return CURLE_OK for `option`.
    static func check(_ code: CURLcode, _ option: CURLoption) throws(CurlOptionError) {
        guard code == CURLE_OK else { throw CurlOptionError(option: option.rawValue, code: code.rawValue) }
    }
}

/// A protocol a transfer may use, by libcurl's name and CURLPROTO_* bit.
enum CurlProtocol: String {
    case http, https, file

    var bit: Int {
        switch self {
        case .http: return 1 << 0
        case .https: return 1 << 1
        case .file: return 1 << 10
        }
    }
}

/// An option that libcurl refused (its CURLoption), and its answer (a CURLcode).
struct CurlOptionError: Error {
    let option: CURLoption.RawValue
    let code: CURLcode.RawValue

    /// The options PatchSync sets that libcurl gained after the oldest release it loads (7.68.0, the first
    /// with curl_multi_wakeup), with their names and the release that added each.
    static let added: [CURLoption.RawValue: (name: String, release: String)] = [
        CURLOPT_AWS_SIGV4.rawValue: ("CURLOPT_AWS_SIGV4", "7.75.0")
    ]

    /// The library's error for `libcurl` (the version loaded): unavailable (69) when it lacks the option
    /// (too old, or built without it), naming the release that has it; internal for another refusal.
    func libraryError(libcurl: String = LoadedCurl.version) -> PatchSyncError {
        let known = Self.added[option]
        let name = known?.name ?? "option \(option)"
        guard code == CURLE_UNKNOWN_OPTION.rawValue || code == CURLE_NOT_BUILT_IN.rawValue else {
            let reason =
                ccurl_easy_strerror(CURLcode(rawValue: code)).map { String(cString: $0) } ?? "libcurl error \(code)"
            return PatchSyncError(.internal, "libcurl \(libcurl) refused \(name): \(reason); nothing was sent")
        }
        let needed = known.map { "libcurl \($0.release) or later, built with it" } ?? "a newer libcurl"
        return PatchSyncError(
            .originUnavailable, "libcurl \(libcurl) lacks \(name) (\(needed)); nothing was sent",
            remedy: "install \(known.map { "libcurl \($0.release) or later" } ?? "a newer libcurl") "
                + "(Debian: apt-get install libcurl4)")
    }
}

/// The libcurl that ccurl_load() loaded.
enum LoadedCurl {
    /// Its version as libcurl numbers it (0x074b00 for 7.75.0) and as text; zero and "unknown" before it
    /// is loaded.
    static var release: (number: UInt32, text: String) {
        guard let info = ccurl_version_info()?.pointee else { return (0, "unknown") }
        return (info.version_num, info.version.map { String(cString: $0) } ?? "unknown")
    }

    /// Its version as text ("7.88.1").
    static var version: String { release.text }
}
