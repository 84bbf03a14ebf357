import Foundation

/// Where trusted metadata comes from: the origin's `metadata/` folder on some mirror.
protocol MetadataSource: Sendable {
    /// The named metadata file, at most `maxBytes` long; nil when no mirror has it.
    func metadata(_ name: String, maxBytes: Int64) async throws(PatchSyncError) -> Data?
}

/// The verified top-level metadata after a refresh.
struct TrustedMetadata: Sendable {
    let root: Signed<RootMetadata>
    let timestamp: Signed<TimestampMetadata>
    let snapshot: Signed<SnapshotMetadata>
    let targets: Signed<TargetsMetadata>
}

/// The TUF client workflow for the top-level roles (specification 1.0, "detailed
/// client workflow"): root rotation, then timestamp, snapshot and targets, each
/// checked for signatures against thresholds, versions that never go back,
/// expiry, and the lengths and hashes that the role above pins.
struct TrustClient: Sendable {
    /// Bounds for metadata whose length nothing pins (the reference implementation's defaults).
    static let maxRootBytes: Int64 = 512_000
    static let maxTimestampBytes: Int64 = 16_384
    static let maxSnapshotBytes: Int64 = 2_000_000
    static let maxTargetsBytes: Int64 = 5_000_000
    static let maxRootRotations = 32

    /// The trusted metadata folder (`.patchsync/metadata`).
    let directory: String
    let source: any MetadataSource
    let now: Date

    /// Runs the workflow and returns the verified metadata, persisting each new trusted file.
    func refresh() async throws(PatchSyncError) -> TrustedMetadata {
        let root = try await updateRoot()
        let timestamp = try await updateTimestamp(root: root.signed)
        let snapshot = try await updateSnapshot(root: root.signed, timestamp: timestamp.signed)
        let targets = try await updateTargets(root: root.signed, snapshot: snapshot.signed)
        return TrustedMetadata(root: root, timestamp: timestamp, snapshot: snapshot, targets: targets)
    }

    private func updateRoot() async throws(PatchSyncError) -> Signed<RootMetadata> {
        guard let data = try? FileSystem.read(directory + "/root.json", limit: Int(Self.maxRootBytes)) else {
            throw PatchSyncError(.usage, "no trusted root in \(directory)",
                                 remedy: "run `patchsync init --root ROOT_JSON …` first")
        }
        var trusted: Signed<RootMetadata> = try Signed(parsing: data, name: "trusted root.json")
        let original = trusted.signed
        for _ in 0..<Self.maxRootRotations {
            let version = trusted.signed.version + 1
            let name = "\(version).root.json"
            guard let next = try await source.metadata(name, maxBytes: Self.maxRootBytes) else { break }
            let candidate: Signed<RootMetadata> = try Signed(parsing: next, name: name)
            try candidate.verify(role: try role("root", in: trusted.signed, name), keys: trusted.signed.keys,
                                 name: "\(name) (by the trusted root's keys)")
            try candidate.verify(role: try role("root", in: candidate.signed, name), keys: candidate.signed.keys,
                                 name: "\(name) (by its own keys)")
            guard candidate.signed.version == version else {
                throw refusal("\(name) has version \(candidate.signed.version), expected \(version)")
            }
            trusted = candidate
            try persist(next, "root.json")
        }
        try checkExpiry(trusted.signed, "root")
        if trusted.signed.version != original.version {
            for (role, file) in [("timestamp", "timestamp.json"), ("snapshot", "snapshot.json")]
            where trusted.signed.roles[role] != original.roles[role] {
                try? FileSystem.remove(directory + "/" + file)  // fast-forward recovery: forget old versions
            }
        }
        return trusted
    }

    private func updateTimestamp(root: RootMetadata) async throws(PatchSyncError) -> Signed<TimestampMetadata> {
        guard let data = try await source.metadata("timestamp.json", maxBytes: Self.maxTimestampBytes) else {
            throw PatchSyncError(.originUnavailable, "no mirror serves metadata/timestamp.json",
                                 remedy: "check the remotes, or ask the publisher to run `patchsync repo refresh`")
        }
        let new: Signed<TimestampMetadata> = try verified(data, "timestamp.json", root: root)
        if let old: Signed<TimestampMetadata> = trustedCopy("timestamp.json", root: root) {
            guard new.signed.version >= old.signed.version else {
                throw refusal("timestamp.json version \(new.signed.version) is older than trusted "
                              + "\(old.signed.version) (rollback)")
            }
            let oldSnap = old.signed.meta["snapshot.json"]?.version ?? 0
            guard (new.signed.meta["snapshot.json"]?.version ?? 0) >= oldSnap else {
                throw refusal("timestamp.json names an older snapshot than the trusted one (rollback)")
            }
            if new.signed.version == old.signed.version { try checkExpiry(old.signed, "timestamp"); return old }
        }
        try checkExpiry(new.signed, "timestamp")
        try persist(data, "timestamp.json")
        return new
    }

    private func updateSnapshot(root: RootMetadata,
                                timestamp: TimestampMetadata) async throws(PatchSyncError) -> Signed<SnapshotMetadata> {
        guard let meta = timestamp.meta["snapshot.json"] else { throw refusal("timestamp.json names no snapshot") }
        let name = "\(meta.version).snapshot.json"
        let data = try await pinned(name, meta: meta, defaultMax: Self.maxSnapshotBytes)
        let new: Signed<SnapshotMetadata> = try verified(data, name, root: root)
        guard new.signed.version == meta.version else {
            throw refusal("\(name) has version \(new.signed.version), timestamp says \(meta.version)")
        }
        if let old: Signed<SnapshotMetadata> = trustedCopy("snapshot.json", root: root) {
            for (file, entry) in old.signed.meta {
                guard let now = new.signed.meta[file], now.version >= entry.version else {
                    throw refusal("\(name) lists \(file) at an older version than trusted (rollback)")
                }
            }
        }
        try checkExpiry(new.signed, "snapshot")
        try persist(data, "snapshot.json")
        return new
    }

    private func updateTargets(root: RootMetadata,
                               snapshot: SnapshotMetadata) async throws(PatchSyncError) -> Signed<TargetsMetadata> {
        guard let meta = snapshot.meta["targets.json"] else { throw refusal("snapshot names no targets.json") }
        let name = "\(meta.version).targets.json"
        let data = try await pinned(name, meta: meta, defaultMax: Self.maxTargetsBytes)
        let new: Signed<TargetsMetadata> = try verified(data, name, root: root)
        guard new.signed.version == meta.version else {
            throw refusal("\(name) has version \(new.signed.version), snapshot says \(meta.version)")
        }
        try checkExpiry(new.signed, "targets")
        try persist(data, "targets.json")
        return new
    }

    /// Fetches metadata that the role above pins by version, and maybe length and hash.
    private func pinned(_ name: String, meta: MetaFile, defaultMax: Int64) async throws(PatchSyncError) -> Data {
        let limit = meta.length.map(Int64.init) ?? defaultMax
        guard let data = try await source.metadata(name, maxBytes: limit) else {
            throw PatchSyncError(.originUnavailable, "no mirror serves metadata/\(name)")
        }
        if let length = meta.length, data.count != length {
            throw refusal("\(name) is \(data.count) bytes, the signed metadata says \(length)")
        }
        if let sha = meta.hashes?["sha256"], SHA256Hasher.hash(data).hex != sha {
            throw refusal("\(name) does not match its signed SHA-256 (mix-and-match or tampering)")
        }
        return data
    }

    private func verified<T: TUFSigned>(_ data: Data, _ name: String,
                                        root: RootMetadata) throws(PatchSyncError) -> Signed<T> {
        let signed: Signed<T> = try Signed(parsing: data, name: name)
        try signed.verify(role: try role(T.roleName, in: root, name), keys: root.keys, name: name)
        return signed
    }

    /// The locally trusted copy of a role, if it still verifies under the current root.
    private func trustedCopy<T: TUFSigned>(_ file: String, root: RootMetadata) -> Signed<T>? {
        guard let data = try? FileSystem.read(directory + "/" + file, limit: 8 << 20) else { return nil }
        return try? verified(data, file, root: root)
    }

    private func role(_ name: String, in root: RootMetadata, _ file: String) throws(PatchSyncError) -> TUFRole {
        guard let role = root.roles[name] else { throw refusal("the root used for \(file) defines no \(name) role") }
        return role
    }

    private func checkExpiry<T: TUFSigned>(_ meta: T, _ role: String) throws(PatchSyncError) {
        guard meta.expires > now else {
            throw PatchSyncError(.refusedData,
                                 "\(role) metadata version \(meta.version) expired at \(TUFCoding.format(meta.expires))",
                                 remedy: "the publisher must re-sign it (`patchsync repo refresh`); "
                                     + "if this machine's clock is wrong, correct it")
        }
    }

    private func persist(_ data: Data, _ name: String) throws(PatchSyncError) {
        do { try FileSystem.writeAtomically(data, to: directory + "/" + name) } catch {
            throw PatchSyncError.wrap(error)
        }
    }

    private func refusal(_ message: String) -> PatchSyncError {
        PatchSyncError(.refusedData, message, remedy: "the origin serves metadata that fails verification; "
                       + "nothing was changed — check the mirror or contact the publisher")
    }
}
