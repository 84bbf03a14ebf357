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
            try FileSystem.writeAtomically(data, to: metadataDirectory + "/" + OriginLayout.rootName)
        } catch { throw PatchSyncError.wrap(error) }
    }

    /// The client workflow for the top-level metadata; returns the trusted versions by role.
    @discardableResult
    public func refresh(metadataURL: String) async throws(PatchSyncError) -> [String: Int] {
        let (_, trusted, _) = try await refreshed(metadataURL)
        return [
            "root": trusted.root.signed.version, "timestamp": trusted.timestamp.signed.version,
            "snapshot": trusted.snapshot.signed.version, "targets": trusted.targets.signed.version
        ]
    }

    /// Refreshes, finds `targetName` (searching delegations), and stores it verified in
    /// `targetDirectory` under its percent-encoded name; a file already there with the signed
    /// length and hashes is kept without downloading. Returns the stored file's path.
    @discardableResult
    public func download(
        target targetName: String, metadataURL: String, targetBaseURL: String,
        targetDirectory: String
    ) async throws(PatchSyncError) -> String {
        let started = Date()
        let (client, trusted, http) = try await refreshed(metadataURL)
        guard let target = try await client.findTarget(targetName, in: trusted) else {
            throw PatchSyncError(
                .originUnavailable, "no trusted targets metadata lists \(targetName)",
                remedy: "check the target name; delegations were searched")
        }
        let stored = targetDirectory + "/" + (try Self.localName(targetName))
        if let existing = try? FileSystem.read(stored, limit: Int(min(target.length, Int64(Int.max)))),
            (try? Self.check(existing, against: target, name: stored)) != nil
        {
            return stored
        }
        var path = targetName
        if trusted.root.signed.consistentSnapshot,
            let hash = target.hashes["sha256"] ?? target.hashes.sorted(by: { $0.key < $1.key }).first?.value
        {
            path = OriginLayout.consistentName(targetName, sha256: hash)
        }
        let mirror = try Origin(mirrors: [targetBaseURL], client: http)
        guard
            let data = try await mirror.whole(
                path, maxBytes: target.length,
                timeout: deadlineSeconds - Date().timeIntervalSince(started))
        else {
            throw PatchSyncError(.originUnavailable, "\(targetBaseURL) has no \(path)")
        }
        try Self.check(data, against: target, name: path)
        do {
            try FileSystem.makeDirectory(targetDirectory)
            try FileSystem.writeAtomically(data, to: stored)
        } catch { throw PatchSyncError.wrap(error) }
        return stored
    }

    /// The signed length and every known signed hash of a target.
    private static func check(_ data: Data, against target: TargetFile, name: String) throws(PatchSyncError) {
        guard data.count == target.length else {
            throw PatchSyncError(.refusedData, "\(name) is \(data.count) bytes, targets metadata says \(target.length)")
        }
        try TrustClient.checkHashes(data, target.hashes, name: name)
    }

    private func refreshed(_ metadataURL: String) async throws(PatchSyncError)
        -> (TrustClient, TrustedMetadata, HTTPClient)
    {
        let http = try HTTPClient()
        let source = URLMetadataSource(origin: try Origin(mirrors: [metadataURL], client: http))
        let client = TrustClient(
            directory: metadataDirectory, source: source, now: now,
            deadline: Date() + deadlineSeconds)
        return (client, try await client.refresh(), http)
    }

    /// The file name a target is stored under: percent-encoded as the reference client does, so it is
    /// one path component; `.`, `..` and the empty name are refused.
    static func localName(_ target: String) throws(PatchSyncError) -> String {
        let name = TrustClient.percentEncoded(target)
        guard !["", ".", ".."].contains(name) else {
            throw PatchSyncError(
                .usage, "target name '\(target)' cannot be stored as a file",
                remedy: "give the path of a target file")
        }
        return name
    }
}

/// Metadata fetched from one base URL (the conformance protocol's `--metadata-url`) rather than
/// an origin's `metadata/` folder; 403 and 404 both mean "not there", as in the reference client.
struct URLMetadataSource: MetadataSource {
    let origin: Origin

    func metadata(_ name: String, maxBytes: Int64, timeout: TimeInterval?) async throws(PatchSyncError) -> Data? {
        try await origin.whole(name, maxBytes: maxBytes, timeout: timeout, escaped: true)
    }
}
