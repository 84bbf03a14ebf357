import Foundation

/// One request to a LAN share (``ShareServer``), parsed from its head (request line and headers, up to
/// the blank line). The only resource is a chunk, by the repository the share follows and the chunk's
/// SHA-256: `GET /patchsync/v1/<repository>/chunks/<sha256>` (or HEAD). Anything else is refused with
/// the status that says why; no path of the install is ever named by a request.
public struct ShareRequest: Sendable, Equatable {
    /// The repository's identity (``ShareIdentity``), 64 hex digits.
    public var repository: String
    public var chunk: SHA256Digest
    /// HEAD: the status and length, no body.
    public var headOnly: Bool
    /// The client asked to close the connection after this response.
    public var close: Bool

    /// The longest request head a share reads.
    public static let maxHeadBytes = 8192
    /// The most header lines a share reads.
    static let maxHeaders = 64
    static let prefix = "/patchsync/v1/"

    /// A request refused: the status to answer, and why (for the share's log).
    public struct Refusal: Error, Sendable, Equatable {
        public var status: Int
        public var reason: String
    }

    /// The path a client asks for `chunk` of `repository`.
    public static func path(repository: String, chunk: SHA256Digest) -> String {
        "\(prefix)\(repository)/chunks/\(chunk.hex)"
    }

    /// Parses a request head (without the final blank line, or with it). Total: any bytes give a
    /// request or a refusal, never a trap.
    public static func parse(_ head: [UInt8]) -> Result<ShareRequest, Refusal> {
        func refuse(_ status: Int, _ reason: String) -> Result<ShareRequest, Refusal> {
            .failure(Refusal(status: status, reason: reason))
        }
        guard head.count <= maxHeadBytes else { return refuse(431, "request head over \(maxHeadBytes) bytes") }
        var lines: [ArraySlice<UInt8>]
        switch splitLines(head) {
        case .success(let split): lines = split
        case .failure(let refusal): return .failure(refusal)
        }
        while lines.last?.isEmpty == true { lines.removeLast() }
        guard let requestLine = lines.first, !requestLine.isEmpty else { return refuse(400, "no request line") }
        guard lines.count - 1 <= maxHeaders else { return refuse(431, "more than \(maxHeaders) header lines") }
        let parts = requestLine.split(separator: 0x20, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return refuse(400, "a request line that is not METHOD TARGET VERSION") }
        let method = String(decoding: parts[0], as: UTF8.self)
        let target = String(decoding: parts[1], as: UTF8.self)
        let version = String(decoding: parts[2], as: UTF8.self)
        guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
            return refuse(505, "HTTP version \(version.prefix(16))")
        }
        guard method == "GET" || method == "HEAD" else { return refuse(405, "method \(method.prefix(16))") }
        var close = version == "HTTP/1.0"
        switch headersSayClose(lines.dropFirst()) {
        case .success(let closes): close = close || closes
        case .failure(let refusal): return .failure(refusal)
        }
        guard target.hasPrefix(prefix) else { return refuse(404, "not a chunk") }
        let rest = target.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
        guard rest.count == 3, rest[1] == "chunks", rest[0].count == 64, rest[0].allSatisfy(isLowerHex),
            rest[2].allSatisfy(isLowerHex), let chunk = SHA256Digest(hex: String(rest[2]))
        else { return refuse(404, "not a chunk") }
        return .success(
            ShareRequest(repository: String(rest[0]), chunk: chunk, headOnly: method == "HEAD", close: close))
    }

    /// The head's lines. Lines end in CRLF; a bare CR or LF, a NUL or any other control byte is refused
    /// (request smuggling starts with lines two parsers split differently).
    private static func splitLines(_ head: [UInt8]) -> Result<[ArraySlice<UInt8>], Refusal> {
        func refuse(_ status: Int, _ reason: String) -> Result<[ArraySlice<UInt8>], Refusal> {
            .failure(Refusal(status: status, reason: reason))
        }
        var lines: [ArraySlice<UInt8>] = []
        var start = 0, index = 0
        while index < head.count {
            let byte = head[index]
            if byte == 0x0d {
                guard index + 1 < head.count, head[index + 1] == 0x0a else { return refuse(400, "a CR without LF") }
                lines.append(head[start..<index])
                index += 2
                start = index
                continue
            }
            if byte == 0x0a { return refuse(400, "a LF without CR") }
            if byte < 0x20 && byte != 0x09 || byte == 0x7f { return refuse(400, "a control byte") }
            index += 1
        }
        if start < head.count { lines.append(head[start..<head.count]) }
        return .success(lines)
    }

    /// Checks the header lines (one Host, no body, nothing a share never takes); whether they ask for the
    /// connection to close.
    private static func headersSayClose(_ lines: ArraySlice<ArraySlice<UInt8>>) -> Result<Bool, Refusal> {
        func refuse(_ status: Int, _ reason: String) -> Result<Bool, Refusal> {
            .failure(Refusal(status: status, reason: reason))
        }
        var close = false
        var host = false
        for line in lines {
            guard let colon = line.firstIndex(of: 0x3a), colon > line.startIndex else {
                return refuse(400, "a header line without a name")
            }
            let name = line[line.startIndex..<colon]
            guard name.allSatisfy(isTokenByte) else { return refuse(400, "a header name with a byte outside a token") }
            let lower = String(decoding: name, as: UTF8.self).lowercased()
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingCharacters(in: .whitespaces)
                .lowercased()
            switch lower {
            case "host":
                guard !host else { return refuse(400, "two Host headers") }
                host = true
            case "connection":
                if value.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == "close" }) {
                    close = true
                }
            case "content-length": guard value == "0" else { return refuse(400, "a request body") }
            case "transfer-encoding", "expect", "upgrade": return refuse(400, "\(lower), which a share never takes")
            default: continue
            }
        }
        return .success(close)
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default: return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    private static func isLowerHex(_ c: Character) -> Bool { ("0"..."9").contains(c) || ("a"..."f").contains(c) }
}
