import Foundation

/// Where an origin is uploaded: a bucket and key prefix of an S3-compatible store (AWS S3, R2, GCS's XML
/// API, MinIO…), its endpoint, region and the credentials that sign requests (AWS SigV4).
public struct S3Bucket: Sendable {
    public struct Credentials: Sendable {
        public var accessKeyId: String
        public var secretAccessKey: String
        public var sessionToken: String?

        public init(accessKeyId: String, secretAccessKey: String, sessionToken: String? = nil) {
            self.accessKeyId = accessKeyId
            self.secretAccessKey = secretAccessKey
            self.sessionToken = sessionToken
        }
    }

    public var bucket: String
    /// The key prefix, without a leading or trailing slash ("" for the bucket's root).
    public var prefix: String
    /// The endpoint's URL (path-style requests: ENDPOINT/BUCKET/KEY); nil for AWS S3 itself
    /// (virtual-hosted: https://BUCKET.s3.REGION.amazonaws.com/KEY).
    public var endpoint: String?
    public var region: String
    public var credentials: Credentials
    /// A private CA for the endpoint's TLS certificate.
    public var caFile: String?

    /// Parses `s3://BUCKET/PREFIX`.
    public init(url: String, endpoint: String?, region: String, credentials: Credentials) throws(PatchSyncError) {
        guard url.hasPrefix("s3://") else {
            throw PatchSyncError(.usage, "\(url) is not an S3 location", remedy: "write it as s3://BUCKET/PREFIX")
        }
        let rest = url.dropFirst(5)
        let bucket = String(rest.prefix { $0 != "/" })
        guard !bucket.isEmpty, bucket.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_" })
        else {
            throw PatchSyncError(.usage, "\(url) names no valid bucket", remedy: "write it as s3://BUCKET/PREFIX")
        }
        self.bucket = bucket
        prefix = rest.dropFirst(bucket.count).split(separator: "/").joined(separator: "/")
        self.endpoint = endpoint.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 }
        self.region = region
        self.credentials = credentials
    }

    /// The bucket as the commands take it: `s3://BUCKET/PREFIX`, with `--endpoint` for a store other than
    /// AWS S3, ready to paste after `patchsync upload ORIGIN`.
    public var commandArguments: String {
        "s3://\(bucket)" + (prefix.isEmpty ? "" : "/" + prefix) + (endpoint.map { " --endpoint \($0)" } ?? "")
    }

    /// The bucket as a player's client reads it (anonymous GETs), for `--remote`.
    public var publicURL: String { baseURL + (prefix.isEmpty ? "" : "/" + Self.encode(prefix)) }

    private var baseURL: String {
        endpoint.map { "\($0)/\(bucket)" } ?? "https://\(bucket).s3.\(region).amazonaws.com"
    }

    /// The URL of `path` (relative to the origin) in the bucket, percent-encoded as SigV4 signs it.
    func url(_ path: String) -> String {
        baseURL + "/" + Self.encode(prefix.isEmpty ? path : prefix + "/" + path)
    }

    /// The URL of a ListObjectsV2 request for the keys under the prefix, from the page `continuation`
    /// names on. Its query is written in SigV4's canonical form (parameters sorted by name, values
    /// encoded, "/" too), which libcurl before 8.3 signs as it is written.
    func listURL(continuation: String?) -> String {
        var query: [String] = []
        if let continuation { query.append("continuation-token=" + Self.encode(continuation, slash: false)) }
        query.append("list-type=2")
        if !prefix.isEmpty { query.append("prefix=" + Self.encode(prefix + "/", slash: false)) }
        return baseURL + (endpoint == nil ? "/" : "") + "?" + query.joined(separator: "&")
    }

    /// The path relative to the origin of the bucket's `key`; nil for a key outside the prefix.
    func path(ofKey key: String) -> String? {
        guard !prefix.isEmpty else { return key }
        guard key.hasPrefix(prefix + "/") else { return nil }
        return String(key.dropFirst(prefix.count + 1))
    }

    /// RFC 3986 encoding of every byte but the unreserved ones and (unless `slash` is false, as in a
    /// query) "/": "+" must be %2B, as S3 signs it.
    static func encode(_ key: String, slash: Bool = true) -> String {
        var out = ""
        for byte in key.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: "/") where slash:
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }
}

extension S3Bucket.Credentials {
    /// The credentials the AWS tools would use: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (and
    /// `AWS_SESSION_TOKEN`), else the profile `AWS_PROFILE` (default "default") of
    /// `AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`.
    public static func fromEnvironment(_ env: [String: String] = ProcessInfo.processInfo.environment)
        throws(PatchSyncError) -> Self
    {
        if let id = env["AWS_ACCESS_KEY_ID"], let secret = env["AWS_SECRET_ACCESS_KEY"], !id.isEmpty, !secret.isEmpty {
            return Self(
                accessKeyId: id, secretAccessKey: secret,
                sessionToken: env["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 })
        }
        let profile = env["AWS_PROFILE"] ?? "default"
        let file = env["AWS_SHARED_CREDENTIALS_FILE"] ?? (env["HOME"] ?? NSHomeDirectory()) + "/.aws/credentials"
        let values = FileSystem.exists(file) ? try iniSection(file, profile) : [:]
        guard let id = values["aws_access_key_id"], let secret = values["aws_secret_access_key"] else {
            throw PatchSyncError(
                .usage,
                "no S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set and \(file) "
                    + "has no profile [\(profile)] with both keys",
                remedy: "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add them to \(file)")
        }
        return Self(accessKeyId: id, secretAccessKey: secret, sessionToken: values["aws_session_token"])
    }

    /// The region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's in `~/.aws/config`, or us-east-1.
    public static func region(_ env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let region = env["AWS_REGION"] ?? env["AWS_DEFAULT_REGION"], !region.isEmpty { return region }
        let profile = env["AWS_PROFILE"] ?? "default"
        let file = env["AWS_CONFIG_FILE"] ?? (env["HOME"] ?? NSHomeDirectory()) + "/.aws/config"
        let section = profile == "default" ? "default" : "profile " + profile
        return (try? iniSection(file, section))?["region"] ?? "us-east-1"
    }

    /// The `key = value` lines of section `[name]` of an INI file (the AWS tools' format).
    static func iniSection(_ path: String, _ name: String) throws(PatchSyncError) -> [String: String] {
        let text = String(decoding: try FileSystem.read(path, limit: 1 << 20), as: UTF8.self)
        var values: [String: String] = [:], inside = false
        for raw in text.split(whereSeparator: \.isNewline) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("[") {
                inside = line == "[\(name)]"
                continue
            }
            guard inside, !line.hasPrefix("#"), !line.hasPrefix(";"), let eq = line.firstIndex(of: "=") else {
                continue
            }
            values[line[..<eq].trimmingCharacters(in: .whitespaces)] = line[line.index(after: eq)...]
                .trimmingCharacters(in: .whitespaces)
        }
        return values
    }
}
