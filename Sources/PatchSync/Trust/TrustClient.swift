import Foundation

/// The verified top-level metadata after a refresh.
struct TrustedMetadata: Sendable {
    let root: Signed<RootMetadata>
    let timestamp: Signed<TimestampMetadata>
    let snapshot: Signed<SnapshotMetadata>
    let targets: Signed<TargetsMetadata>
}

/// The TUF client workflow (specification 1.0.31, "detailed client workflow"): root
/// rotation, then timestamp, snapshot and targets, each checked for signatures against
/// thresholds, versions that never go back, expiry, and the lengths and hashes that the
/// role above pins; then, for one target, the pre-order depth-first search of delegations.
/// Each newly verified file is persisted under its non-versioned name as soon as it is trusted.
struct TrustClient: Sendable {
    /// Bounds for metadata whose length nothing pins (the reference implementation's defaults).
    static let maxRootBytes: Int64 = 512_000
    static let maxTimestampBytes: Int64 = 16_384
    static let maxSnapshotBytes: Int64 = 2_000_000
    static let maxTargetsBytes: Int64 = 5_000_000
    static let maxRootRotations = 32
    /// How many targets roles (the top-level one included) one target search may visit, as in python-tuf.
    static let maxDelegations = 32
    static let topLevelRoles: Set<String> = ["root", "timestamp", "snapshot", "targets"]

    /// The trusted metadata folder (`.patchsync/metadata`).
    let directory: String
    let source: any MetadataSource
    let now: Date
    /// When set, a refresh (or target search) still running at this time is abandoned (slow retrieval).
    var deadline: Date?

    init(directory: String, source: any MetadataSource, now: Date, deadline: Date? = nil) {
        self.directory = directory
        self.source = source
        self.now = now
        self.deadline = deadline
    }

    /// Runs the workflow and returns the verified metadata, persisting each new trusted file.
    func refresh() async throws(PatchSyncError) -> TrustedMetadata {
        let root = try await updateRoot()
        let timestamp = try await updateTimestamp(root: root.signed)
        let snapshot = try await updateSnapshot(root: root.signed, timestamp: timestamp.signed)
        let targets = try await updateTargets(root: root.signed, snapshot: snapshot.signed)
        return TrustedMetadata(root: root, timestamp: timestamp, snapshot: snapshot, targets: targets)
    }

    // MARK: root

    private func updateRoot() async throws(PatchSyncError) -> Signed<RootMetadata> {
        guard let data = try? FileSystem.read(directory + "/" + OriginLayout.rootName, limit: Int(Self.maxRootBytes))
        else {
            throw PatchSyncError(
                .usage, "no trusted root in \(directory)",
                remedy: "run `patchsync init --root ROOT_JSON …` first")
        }
        var trusted: Signed<RootMetadata> = try Signed(parsing: data, name: "trusted root.json")
        // The root a client starts from must meet its own threshold, as every later root must.
        try trusted.verify(
            role: try role("root", in: trusted.signed, "trusted root.json"), keys: trusted.signed.keys,
            name: "trusted root.json (by its own keys)")
        let original = trusted.signed
        for _ in 0..<Self.maxRootRotations {
            let version = trusted.signed.version + 1
            let name = OriginLayout.fileName(role: "root", version: version)
            guard let next = try await fetch(name, maxBytes: Self.maxRootBytes) else { break }
            let candidate: Signed<RootMetadata> = try Signed(parsing: next, name: name)
            try candidate.verify(
                role: try role("root", in: trusted.signed, name), keys: trusted.signed.keys,
                name: "\(name) (by the trusted root's keys)")
            try candidate.verify(
                role: try role("root", in: candidate.signed, name), keys: candidate.signed.keys,
                name: "\(name) (by its own keys)")
            guard candidate.signed.version == version else {
                throw refusal("\(name) has version \(candidate.signed.version), expected \(version)")
            }
            trusted = candidate
            try persist(next, OriginLayout.rootName)
        }
        try checkExpiry(trusted.signed, "root")
        // Fast-forward recovery (specification 5.3.11): when the timestamp or the snapshot keys were
        // rotated, both trusted files go, since either may pin versions that a compromised key inflated.
        if trusted.signed.version != original.version,
            ["timestamp", "snapshot"].contains(where: { trusted.signed.roles[$0] != original.roles[$0] })
        {
            TrustClient.forgetTrustedMetadata([OriginLayout.timestampName, OriginLayout.snapshotName], in: directory)
        }
        return trusted
    }

    // MARK: timestamp, snapshot, targets

    private func updateTimestamp(root: RootMetadata) async throws(PatchSyncError) -> Signed<TimestampMetadata> {
        let name = OriginLayout.timestampName
        guard let data = try await fetch(name, maxBytes: Self.maxTimestampBytes) else {
            throw PatchSyncError(
                .originUnavailable, "no mirror serves \(OriginLayout.timestamp)",
                remedy: "check the remotes, or ask the publisher to run `patchsync repo refresh`")
        }
        let new: Signed<TimestampMetadata> = try verified(
            data, name, role: try role("timestamp", in: root, name), keys: root.keys)
        if let old: Signed<TimestampMetadata> = trustedCopy(name, role: root.roles["timestamp"], keys: root.keys) {
            guard new.signed.version >= old.signed.version else {
                throw refusal(
                    "timestamp.json version \(new.signed.version) is older than trusted "
                        + "\(old.signed.version) (rollback)")
            }
            let oldSnap = old.signed.meta[OriginLayout.snapshotName]?.version ?? 0
            guard (new.signed.meta[OriginLayout.snapshotName]?.version ?? 0) >= oldSnap else {
                throw refusal("timestamp.json names an older snapshot than the trusted one (rollback)")
            }
            if new.signed.version == old.signed.version {
                try checkExpiry(old.signed, "timestamp")
                return old
            }
        }
        try checkExpiry(new.signed, "timestamp")
        try persist(data, name)
        return new
    }

    private func updateSnapshot(
        root: RootMetadata,
        timestamp: TimestampMetadata
    ) async throws(PatchSyncError) -> Signed<SnapshotMetadata> {
        guard let meta = timestamp.meta[OriginLayout.snapshotName] else {
            throw refusal("timestamp.json names no snapshot")
        }
        if let cached: Signed<SnapshotMetadata> = cachedCopy(
            OriginLayout.snapshotName, meta: meta, role: root.roles["snapshot"],
            keys: root.keys)
        {
            try checkExpiry(cached.signed, "snapshot")
            return cached
        }
        let name = Self.remoteName("snapshot", version: meta.version, consistent: root.consistentSnapshot)
        let data = try await pinned(name, meta: meta, defaultMax: Self.maxSnapshotBytes)
        let new: Signed<SnapshotMetadata> = try verified(
            data, name, role: try role("snapshot", in: root, name), keys: root.keys)
        guard new.signed.version == meta.version else {
            throw refusal("\(name) has version \(new.signed.version), timestamp says \(meta.version)")
        }
        if let old: Signed<SnapshotMetadata> = trustedCopy(
            OriginLayout.snapshotName, role: root.roles["snapshot"], keys: root.keys)
        {
            for (file, entry) in old.signed.meta {
                guard let now = new.signed.meta[file], now.version >= entry.version else {
                    throw refusal("\(name) lists \(file) at an older version than trusted, or drops it (rollback)")
                }
            }
        }
        try checkExpiry(new.signed, "snapshot")
        try persist(data, OriginLayout.snapshotName)
        return new
    }

    private func updateTargets(
        root: RootMetadata,
        snapshot: SnapshotMetadata
    ) async throws(PatchSyncError) -> Signed<TargetsMetadata> {
        try await loadTargets(
            "targets", role: try role("targets", in: root, OriginLayout.targetsName), keys: root.keys,
            snapshot: snapshot, consistent: root.consistentSnapshot)
    }

    /// Fetches, verifies and persists the targets metadata of `name` (top-level or delegated),
    /// at the version, length and hash that snapshot metadata pins.
    private func loadTargets(
        _ name: String, role: TUFRole, keys: [String: TUFKey], snapshot: SnapshotMetadata,
        consistent: Bool
    ) async throws(PatchSyncError) -> Signed<TargetsMetadata> {
        let file = Self.fileName(role: name)  // the local name; snapshot lists the role by its plain name
        guard let meta = snapshot.meta[OriginLayout.metaKey(role: name)] else {
            throw refusal("snapshot names no \(name).json")
        }
        if let cached: Signed<TargetsMetadata> = cachedCopy(file, meta: meta, role: role, keys: keys) {
            try checkExpiry(cached.signed, name)
            return cached
        }
        let remote = Self.remoteName(name, version: meta.version, consistent: consistent)
        let data = try await pinned(remote, meta: meta, defaultMax: Self.maxTargetsBytes)
        let new: Signed<TargetsMetadata> = try verified(data, remote, role: role, keys: keys)
        guard new.signed.version == meta.version else {
            throw refusal("\(remote) has version \(new.signed.version), snapshot says \(meta.version)")
        }
        try checkExpiry(new.signed, name)
        try persist(data, file)
        return new
    }

    // MARK: delegations

    /// The signed entry of `path`: the top-level targets first, then delegated roles in pre-order
    /// depth-first order (spec 5.6.7), stopping at a terminating role that matches and after
    /// ``maxDelegations`` roles. nil when no trusted role lists it.
    func findTarget(_ path: String, in trusted: TrustedMetadata) async throws(PatchSyncError) -> TargetFile? {
        var toVisit: [(role: DelegatedRole?, parent: Signed<TargetsMetadata>?)] = [(nil, nil)]
        var visited = Set<String>()
        var budget = Self.maxDelegations
        while budget > 0, let (delegated, parent) = toVisit.popLast() {
            let name = delegated?.name ?? "targets"
            if visited.contains(name) { continue }
            let metadata: Signed<TargetsMetadata>
            if let delegated, let parent {
                guard !Self.topLevelRoles.contains(delegated.name) else {
                    throw refusal("a delegation names the top-level role \(delegated.name)")
                }
                metadata = try await loadTargets(
                    delegated.name, role: delegated.role,
                    keys: parent.signed.delegations?.keys ?? [:],
                    snapshot: trusted.snapshot.signed,
                    consistent: trusted.root.signed.consistentSnapshot)
            } else {
                metadata = trusted.targets
            }
            if let target = metadata.signed.targets[path] { return target }
            visited.insert(name)
            budget -= 1
            guard let delegations = metadata.signed.delegations else { continue }
            var children: [(role: DelegatedRole?, parent: Signed<TargetsMetadata>?)] = []
            for child in delegations.roles(for: path) {
                children.append((child, metadata))
                if child.terminating {
                    toVisit.removeAll()
                    break
                }
            }
            toVisit.append(contentsOf: children.reversed())
        }
        return nil
    }

    // MARK: helpers

    /// The name a role's metadata is fetched under: `<version>.<role>.json` with consistent snapshots.
    static func remoteName(_ role: String, version: Int, consistent: Bool) -> String {
        OriginLayout.remoteName(role: role, version: version, consistent: consistent)
    }

    /// `<role>.json` with the role name percent-encoded, so no name can leave the metadata folder.
    static func fileName(role: String) -> String { OriginLayout.fileName(role: role) }

    /// Every byte but ASCII letters, digits and `-_.~` percent-encoded (``OriginLayout/percentEncoded(_:)``).
    static func percentEncoded(_ name: String) -> String { OriginLayout.percentEncoded(name) }

    private func fetch(_ name: String, maxBytes: Int64) async throws(PatchSyncError) -> Data? {
        let timeout = deadline?.timeIntervalSinceNow
        if let timeout, timeout <= 0 { throw deadlineError(name) }
        do {
            return try await source.metadata(name, maxBytes: maxBytes, timeout: timeout)
        } catch {
            // The transfer's own timeout is the time left, and libcurl measures it on its own clock:
            // a failure within a quarter second of the deadline is the deadline's.
            if let deadline, Date() >= deadline - 0.25 { throw deadlineError(name) }
            throw error
        }
    }

    private func deadlineError(_ name: String) -> PatchSyncError {
        PatchSyncError(
            .originUnavailable,
            "the metadata refresh passed its deadline while fetching \(name) "
                + "(the mirror is too slow or stalls)",
            remedy: "check the network and the remotes, or raise refreshDeadlineSeconds in .patchsync/config.json")
    }

    /// Fetches metadata that the role above pins by version, and maybe length and hash.
    private func pinned(_ name: String, meta: MetaFile, defaultMax: Int64) async throws(PatchSyncError) -> Data {
        let limit = meta.length.map(Int64.init) ?? defaultMax
        guard let data = try await fetch(name, maxBytes: limit) else {
            throw PatchSyncError(.originUnavailable, "no mirror serves \(OriginLayout.metadata(name))")
        }
        if let length = meta.length, data.count != length {
            throw refusal("\(name) is \(data.count) bytes, the signed metadata says \(length)")
        }
        if let hashes = meta.hashes, !hashes.isEmpty {
            try Self.checkHashes(data, hashes, name: name)
        }
        return data
    }

    /// Every hash the metadata gives that PatchSync knows must match; at least one must be known.
    static func checkHashes(_ data: Data, _ hashes: [String: String], name: String) throws(PatchSyncError) {
        var checked = 0
        for (algorithm, expected) in hashes {
            let actual: String
            switch algorithm {
            case "sha256": actual = SHA256Hasher.hash(data).hex
            case "sha512": actual = SHA256Hasher.sha512(data)
            default: continue
            }
            guard actual == expected.lowercased() else {
                throw PatchSyncError(
                    .refusedData, "\(name) does not match its signed \(algorithm) (mix-and-match or tampering)",
                    remedy: "the mirror serves damaged or substituted data; nothing was changed")
            }
            checked += 1
        }
        guard checked > 0 else {
            throw PatchSyncError(
                .refusedData,
                "\(name) is pinned only by hash algorithms PatchSync does not know "
                    + "(\(hashes.keys.sorted().joined(separator: ", ")))",
                remedy: "ask the publisher to include sha256 hashes")
        }
    }

    private func verified<T: TUFSigned>(
        _ data: Data, _ name: String, role: TUFRole,
        keys: [String: TUFKey]
    ) throws(PatchSyncError) -> Signed<T> {
        let signed: Signed<T> = try Signed(parsing: data, name: name)
        try signed.verify(role: role, keys: keys, name: name)
        return signed
    }

    /// The locally trusted copy of a role when it is exactly what the role above pins now (same
    /// version, and length and hashes when pinned) and still verifies: used without a download,
    /// as the reference implementation does.
    private func cachedCopy<T: TUFSigned>(
        _ file: String, meta: MetaFile, role: TUFRole?,
        keys: [String: TUFKey]
    ) -> Signed<T>? {
        guard let role, let data = try? FileSystem.read(directory + "/" + file, limit: 8 << 20),
            meta.length.map({ $0 == data.count }) ?? true
        else { return nil }
        if let hashes = meta.hashes, !hashes.isEmpty,
            (try? Self.checkHashes(data, hashes, name: file)) == nil
        {
            return nil
        }
        guard let signed: Signed<T> = try? verified(data, file, role: role, keys: keys),
            signed.signed.version == meta.version
        else { return nil }
        return signed
    }

    /// The locally trusted copy of a role, if it still verifies under the current root.
    private func trustedCopy<T: TUFSigned>(_ file: String, role: TUFRole?, keys: [String: TUFKey]) -> Signed<T>? {
        guard let role, let data = try? FileSystem.read(directory + "/" + file, limit: 8 << 20) else { return nil }
        return try? verified(data, file, role: role, keys: keys)
    }

    private func role(_ name: String, in root: RootMetadata, _ file: String) throws(PatchSyncError) -> TUFRole {
        guard let role = root.roles[name] else { throw refusal("the root used for \(file) defines no \(name) role") }
        return role
    }

    private func checkExpiry<T: TUFSigned>(_ meta: T, _ role: String) throws(PatchSyncError) {
        guard meta.expires > now else {
            throw PatchSyncError(
                .refusedData,
                "\(role) metadata version \(meta.version) expired at \(TUFCoding.format(meta.expires))",
                remedy: "the publisher must re-sign it (`\(Self.renewal(of: role))`); "
                    + "if this machine's clock is wrong, correct it")
        }
    }

    /// The publisher's command that signs `role` anew: refresh for the online roles, renew for targets
    /// and root (refresh cannot: it holds only the online key).
    static func renewal(of role: String) -> String {
        switch role {
        case "root": return "patchsync repo renew --root-key ROOT_KEY …"
        case "targets": return "patchsync repo renew --targets-key TARGETS_KEY --online-key ONLINE_KEY …"
        default: return "patchsync repo refresh"
        }
    }

    private func persist(_ data: Data, _ name: String) throws(PatchSyncError) {
        do { try FileSystem.writeAtomically(data, to: directory + "/" + name) } catch {
            throw PatchSyncError.wrap(error)
        }
    }

    private func refusal(_ message: String) -> PatchSyncError {
        PatchSyncError(
            .refusedData, message,
            remedy: "the origin serves metadata that fails verification; "
                + "nothing was changed — check the mirror or contact the publisher")
    }
}

extension TrustClient {
    /// Deletes the trusted copies `names` from the trusted metadata folder `directory` (``TrustClient``'s
    /// fast-forward recovery); a copy that is not there, or cannot be removed, is left.
    static func forgetTrustedMetadata(_ names: [String], in directory: String) {
        for name in names { try? FileSystem.remove(directory + "/" + name) }
    }
}
