import Foundation

/// Entry points for the libFuzzer targets in `Fuzz/` and for the corpus replay in `make test`.
/// Each takes arbitrary bytes; bad input must end in a thrown PatchSyncError, never a crash, a
/// hang or a broken invariant (which traps, so the fuzzer reports it).
@_spi(Fuzzing)
public enum FuzzTargets {
    /// The targets by name, as the corpus folders are named.
    public static let all: [(name: String, run: @Sendable (Data) -> Void)] = [
        ("metadata", metadata), ("canonical-json", canonicalJSON), ("manifest", manifest), ("object", object),
        ("share-request", shareRequest)
    ]

    /// The TUF metadata parser: every role's envelope, signature checks, delegation lookups.
    public static func metadata(_ data: Data) {
        guard data.count <= TrustClient.maxTargetsBytes else { return }
        if let root = try? Signed<RootMetadata>(parsing: data, name: "fuzz") {
            for (name, role) in root.signed.roles {
                _ = try? root.verify(role: role, keys: root.signed.keys, name: name)
            }
        }
        _ = try? Signed<TimestampMetadata>(parsing: data, name: "fuzz")
        _ = try? Signed<SnapshotMetadata>(parsing: data, name: "fuzz")
        if let targets = try? Signed<TargetsMetadata>(parsing: data, name: "fuzz") {
            let delegations = targets.signed.delegations
            for path in ["a", "maps/x.map", String(targets.signed.targets.keys.first ?? "")] {
                for role in delegations?.roles(for: path) ?? [] {
                    _ = TrustClient.fileName(role: role.name)
                    _ = try? targets.verify(role: role.role, keys: delegations?.keys ?? [:], name: role.name)
                }
            }
        }
    }

    /// The canonical-JSON encoder: deterministic, and a fixed point whenever its output parses back
    /// (OLPC canonical JSON leaves control characters raw, so it is not always valid JSON).
    public static func canonicalJSON(_ data: Data) {
        guard let value = try? JSONValue.parse(data, what: "fuzz"), let first = try? value.canonical() else { return }
        precondition((try? value.canonical()) == first, "canonical JSON is not deterministic")
        guard let again = try? JSONValue.parse(Data(first), what: "fuzz canonical") else { return }
        precondition((try? again.canonical()) == first, "canonical JSON is not a fixed point")
    }

    /// The manifest decoder (JSON or gzip'd JSON) with its validation.
    public static func manifest(_ data: Data) {
        _ = try? Manifest.decode(data, what: "fuzz")
    }

    /// The LAN share's request parser: any bytes give a request or a refusal with a status a share
    /// sends; a request it accepts names a chunk of 64 hex digits under a repository of 64, and parsing
    /// its own canonical form gives it back.
    public static func shareRequest(_ data: Data) {
        let bytes = [UInt8](data.prefix(ShareRequest.maxHeadBytes + 16))
        switch ShareRequest.parse(bytes) {
        case .failure(let refusal):
            precondition([400, 404, 405, 431, 505].contains(refusal.status), "a share answers \(refusal.status)")
        case .success(let request):
            precondition(request.repository.count == 64 && request.repository.allSatisfy(\.isHexDigit))
            let again =
                "\(request.headOnly ? "HEAD" : "GET") \(ShareRequest.path(repository: request.repository, chunk: request.chunk)) HTTP/1.1\r\nHost: x"
            guard case .success(let parsed) = ShareRequest.parse(Array(again.utf8)) else {
                preconditionFailure("its own form is refused")
            }
            precondition(parsed.chunk == request.chunk && parsed.repository == request.repository)
        }
        _ = ShareServer.headEnd(bytes)
    }

    /// The object decoder: a stored chunk inflated into a buffer of its signed length (the first
    /// three bytes of the input choose that length, up to 1 MiB), and the bounded gunzip.
    public static func object(_ data: Data) {
        guard data.count >= 3 else { return }
        let length =
            (Int(data[data.startIndex]) << 16 | Int(data[data.startIndex + 1]) << 8
                | Int(data[data.startIndex + 2])) % (1 << 20 + 1)
        let body = data.dropFirst(3)
        let output = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, length), alignment: 16)
        defer { output.deallocate() }
        body.withUnsafeBytes { input in
            _ = Zlib.inflate(input, into: UnsafeMutableRawBufferPointer(rebasing: output[0..<length]))
            _ = Zstd.Decoder().decompress(input, into: UnsafeMutableRawBufferPointer(rebasing: output[0..<length]))
        }
        _ = try? Zlib.gunzip(Data(body), limit: 1 << 20, what: "fuzz")
    }
}
