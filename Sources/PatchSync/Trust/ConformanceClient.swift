import Foundation

/// A plain TUF client over PatchSync's verification: the engine of the `patchsync-tuf-client`
/// conformance adapter. It keeps trusted metadata in one folder under non-versioned names
/// (`root.json`, `timestamp.json`, `snapshot.json`, `targets.json`, `<delegated role>.json`)
/// and downloads targets of any repository that follows the TUF specification 1.0.
public struct ConformanceClient: Sendable {
    public let metadataDirectory: String
    /// The time that expiry is checked against.
    public var now: Date
    /// A whole refresh (or download) must finish within this many seconds.
    public var deadlineSeconds: TimeInterval = 120

    public init(metadataDirectory: String, now: Date = Date()) {
        self.metadataDirectory = metadataDirectory
        self.now = now
    }

    /// Trusts `rootPath` as the initial root: copies it in after checking that it parses as
    /// root metadata. No network.
    public func initialize(trustedRoot rootPath: String) throws(PatchSyncError) {
        let data = try FileSystem.read(rootPath, limit: Int(TrustClient.maxRootBytes))
        _ = try Signed<RootMetadata>(parsing: data, name: rootPath)
        do {
            try FileSystem.makeDirectory(metadataDirectory)
            try FileSystem.writeAtomically(data, to: metadataDirectory + "/root.json")
        } catch { throw PatchSyncError.wrap(error) }
    }

    /// The client workflow for the top-level metadata; returns the trusted versions by role.
    @discardableResult
    public func refresh(metadataURL: String) async throws(PatchSyncError) -> [String: Int] {
        let (_, trusted) = try await refreshed(metadataURL)
        return ["root": trusted.root.signed.version, "timestamp": trusted.timestamp.signed.version,
                "snapshot": trusted.snapshot.signed.version, "targets": trusted.targets.signed.version]
    }

    /// Refreshes, finds `targetName` (searching delegations), and stores it verified in
    /// `targetDirectory` under its percent-encoded name; a file already there with the signed
    /// length and hashes is kept without downloading. Returns the stored file's path.
    @discardableResult
    public func download(target targetName: String, metadataURL: String, targetBaseURL: String,
                         targetDirectory: String) async throws(PatchSyncError) -> String {
        let (client, trusted) = try await refreshed(metadataURL)
        guard let target = try await client.findTarget(targetName, in: trusted) else {
            throw PatchSyncError(.originUnavailable, "no trusted targets metadata lists \(targetName)",
                                 remedy: "check the target name; delegations were searched")
        }
        let stored = targetDirectory + "/" + (try Self.localName(targetName))
        if let existing = try? FileSystem.read(stored, limit: Int(min(target.length, Int64(Int.max)))),
           existing.count == target.length, (try? TrustClient.checkHashes(existing, target.hashes, name: stored)) != nil {
            return stored
        }
        let http = try HTTPClient()
        let url = Self.join(targetBaseURL, Self.remotePath(targetName, target: target,
                                                           consistent: trusted.root.signed.consistentSnapshot))
        let data: Data
        switch await http.fetchData(url: url, maxBytes: target.length, timeout: deadlineSeconds) {
        case .success(let body): data = body
        case .failure(.notFound): throw PatchSyncError(.originUnavailable, "\(url) does not exist")
        case .failure(let failure):
            throw PatchSyncError(.refusedData, "downloading \(url) failed: \(failure)",
                                 remedy: "the mirror serves a damaged target or none; nothing was stored")
        }
        guard data.count == target.length else {
            throw PatchSyncError(.refusedData, "\(url) is \(data.count) bytes, targets metadata says \(target.length)")
        }
        try TrustClient.checkHashes(data, target.hashes, name: url)
        do {
            try FileSystem.makeDirectory(targetDirectory)
            try FileSystem.writeAtomically(data, to: stored)
        } catch { throw PatchSyncError.wrap(error) }
        return stored
    }

    private func refreshed(_ metadataURL: String) async throws(PatchSyncError) -> (TrustClient, TrustedMetadata) {
        let source = try URLMetadataSource(base: metadataURL, client: try HTTPClient())
        let client = TrustClient(directory: metadataDirectory, source: source, now: now,
                                 deadline: Date() + deadlineSeconds)
        return (client, try await client.refresh())
    }

    /// The file name a target is stored under: percent-encoded as the reference client does, so it is
    /// one path component; `.`, `..` and the empty name are refused.
    static func localName(_ target: String) throws(PatchSyncError) -> String {
        let name = TrustClient.percentEncoded(target)
        guard !["", ".", ".."].contains(name) else {
            throw PatchSyncError(.usage, "target name '\(target)' cannot be stored as a file",
                                 remedy: "give the path of a target file")
        }
        return name
    }

    /// The target's path on the mirror: `dir/<hash>.<name>` with consistent snapshots.
    static func remotePath(_ name: String, target: TargetFile, consistent: Bool) -> String {
        guard consistent, let hash = target.hashes["sha256"] ?? target.hashes.sorted(by: { $0.key < $1.key }).first?.value
        else { return name }
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        return (parts.dropLast() + ["\(hash).\(parts.last ?? "")"]).joined(separator: "/")
    }

    static func join(_ base: String, _ path: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "/-._~")
        let escaped = path.addingPercentEncoding(withAllowedCharacters: allowed) ?? path
        return (base.hasSuffix("/") ? base : base + "/") + escaped
    }
}

/// Metadata fetched from one base URL (the conformance protocol's `--metadata-url`).
/// HTTP 403 and 404 both mean "not there", as in the reference implementation.
struct URLMetadataSource: MetadataSource {
    let base: String
    let client: HTTPClient

    init(base: String, client: HTTPClient) throws(PatchSyncError) {
        try Origin.checkMirrors([base])
        self.base = base.hasSuffix("/") ? base : base + "/"
        self.client = client
    }

    func metadata(_ name: String, maxBytes: Int64, timeout: TimeInterval?) async throws(PatchSyncError) -> Data? {
        switch await client.fetchData(url: base + name, maxBytes: maxBytes, timeout: timeout) {
        case .success(let data): return data
        case .failure(.notFound), .failure(.httpStatus(403)): return nil
        case .failure(let failure): throw Origin.error(fetching: name, [(base, failure)])
        }
    }
}
