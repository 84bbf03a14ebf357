import Foundation

/// The publisher's side of the trust chain: writes and re-signs the TUF
/// metadata of an origin folder, with consistent snapshots (nothing but
/// `timestamp.json` and the `root.json` convenience copy is ever overwritten).
public struct Repository: Sendable {
    /// How long each role's metadata stays valid after it is signed.
    public struct Lifetimes: Sendable {
        public var root: TimeInterval = 365 * 86400
        public var targets: TimeInterval = 365 * 86400
        public var snapshot: TimeInterval = 30 * 86400
        public var timestamp: TimeInterval = 7 * 86400
        public init() {}
    }

    public let origin: String
    var root: Signed<RootMetadata>
    var targets: Signed<TargetsMetadata>
    var snapshot: Signed<SnapshotMetadata>
    var timestamp: Signed<TimestampMetadata>

    var metadataDirectory: String { origin + "/metadata" }

    /// Creates a repository in `origin`: root signed by `rootKey`, the other roles by `onlineKey`.
    public static func create(origin: String, rootKey: SigningKey, onlineKey: SigningKey,
                              lifetimes: Lifetimes = .init(), now: Date = Date()) throws(PatchSyncError) -> Repository {
        let dir = origin + "/metadata"
        guard !FileSystem.exists(dir + "/root.json") else {
            throw PatchSyncError(.usage, "\(origin) already holds a repository",
                                 remedy: "publish into it, or choose an empty folder for a new one")
        }
        let rootID = try rootKey.publicKey.keyID(), onlineID = try onlineKey.publicKey.keyID()
        let online = TUFRole(keyids: [onlineID], threshold: 1)
        let rootMeta = RootMetadata(version: 1, expires: now + lifetimes.root,
                                    keys: [rootID: rootKey.publicKey, onlineID: onlineKey.publicKey],
                                    roles: ["root": TUFRole(keyids: [rootID], threshold: 1),
                                            "timestamp": online, "snapshot": online, "targets": online])
        let root = try Signed(signing: rootMeta, with: [rootKey])
        try write(root, to: dir + "/1.root.json")
        try write(root, to: dir + "/root.json")
        var repo = Repository(origin: origin, root: root,
                              targets: try Signed(signing: TargetsMetadata(version: 0, expires: now, targets: [:]),
                                                  with: []),
                              snapshot: try Signed(signing: SnapshotMetadata(version: 0, expires: now, meta: [:]),
                                                   with: []),
                              timestamp: try Signed(signing: TimestampMetadata(version: 0, expires: now, meta: [:]),
                                                    with: []))
        try repo.commit(targets: [:], key: onlineKey, lifetimes: lifetimes, now: now)
        return repo
    }

    /// Loads the repository's current metadata from `origin`.
    public static func load(origin: String) throws(PatchSyncError) -> Repository {
        let dir = origin + "/metadata"
        guard FileSystem.exists(dir + "/timestamp.json") else {
            throw PatchSyncError(.usage, "\(origin) holds no PatchSync repository",
                                 remedy: "create one with `patchsync repo init --origin \(origin) …`")
        }
        let timestamp: Signed<TimestampMetadata> = try read(dir + "/timestamp.json")
        guard let snapVersion = timestamp.signed.meta["snapshot.json"]?.version else {
            throw PatchSyncError(.refusedData, "\(dir)/timestamp.json names no snapshot")
        }
        let snapshot: Signed<SnapshotMetadata> = try read(dir + "/\(snapVersion).snapshot.json")
        guard let targetsVersion = snapshot.signed.meta["targets.json"]?.version else {
            throw PatchSyncError(.refusedData, "\(dir)/\(snapVersion).snapshot.json names no targets")
        }
        let targets: Signed<TargetsMetadata> = try read(dir + "/\(targetsVersion).targets.json")
        var rootVersion = 1
        while FileSystem.exists(dir + "/\(rootVersion + 1).root.json") { rootVersion += 1 }
        let root: Signed<RootMetadata> = try read(dir + "/\(rootVersion).root.json")
        return Repository(origin: origin, root: root, targets: targets, snapshot: snapshot, timestamp: timestamp)
    }

    /// The current targets.
    public var targetFiles: [String: TargetFile] { targets.signed.targets }

    /// Writes new targets, snapshot and timestamp metadata, in that order, so a
    /// client never sees a timestamp that points at metadata not yet there.
    mutating func commit(targets files: [String: TargetFile], key: SigningKey,
                         lifetimes: Lifetimes = .init(), now: Date = Date()) throws(PatchSyncError) {
        try checkOnline(key)
        let newTargets = try Signed(signing: TargetsMetadata(version: targets.signed.version + 1,
                                                             expires: now + lifetimes.targets, targets: files),
                                    with: [key])
        try Self.write(newTargets, to: metadataDirectory + "/\(newTargets.signed.version).targets.json")
        targets = newTargets
        try resign(key: key, lifetimes: lifetimes, now: now)
    }

    /// Re-signs snapshot and timestamp with new versions and expiry: the publisher's cron job.
    public mutating func refresh(key: SigningKey, lifetimes: Lifetimes = .init(), now: Date = Date()) throws(PatchSyncError) {
        try checkOnline(key)
        try resign(key: key, lifetimes: lifetimes, now: now)
    }

    private mutating func resign(key: SigningKey, lifetimes: Lifetimes, now: Date) throws(PatchSyncError) {
        // Pinned by length and hash as well as version: a client then reads targets.json up to its
        // signed length (not a fixed cap), and a mirror cannot swap its bytes.
        let targetsData = try targets.serialized()
        let snap = try Signed(signing: SnapshotMetadata(
            version: snapshot.signed.version + 1, expires: now + lifetimes.snapshot,
            meta: ["targets.json": MetaFile(version: targets.signed.version, length: targetsData.count,
                                            hashes: ["sha256": SHA256Hasher.hash(targetsData).hex])]), with: [key])
        let snapData = try snap.serialized()
        try Self.write(snapData, to: metadataDirectory + "/\(snap.signed.version).snapshot.json")
        let stamp = try Signed(signing: TimestampMetadata(
            version: timestamp.signed.version + 1, expires: now + lifetimes.timestamp,
            meta: ["snapshot.json": MetaFile(version: snap.signed.version, length: snapData.count,
                                             hashes: ["sha256": SHA256Hasher.hash(snapData).hex])]), with: [key])
        try Self.write(stamp, to: metadataDirectory + "/timestamp.json")
        snapshot = snap
        timestamp = stamp
    }

    /// Signs root version N+1 with new keys: `newRootKey` for the root role and, when given,
    /// `newOnlineKey` for timestamp, snapshot and targets. It is signed by the current root key
    /// and the new one, so clients that trust version N accept it; with a new online key,
    /// targets, snapshot and timestamp are re-signed at once, and clients forget their trusted
    /// timestamp and snapshot (fast-forward recovery) when they see the rotation.
    public mutating func rotateRoot(currentRootKey: SigningKey, newRootKey: SigningKey?, newOnlineKey: SigningKey?,
                                    lifetimes: Lifetimes = .init(), now: Date = Date()) throws(PatchSyncError) {
        let currentID = try currentRootKey.publicKey.keyID()
        guard root.signed.roles["root"]?.keyids.contains(currentID) == true else {
            throw PatchSyncError(.usage, "the key \(currentID.prefix(12))… is not a root key of \(origin)",
                                 remedy: "sign with the root key the repository was created with (or last rotated to)")
        }
        guard newRootKey != nil || newOnlineKey != nil else {
            throw PatchSyncError(.usage, "nothing to rotate", remedy: "give --new-root-key, --new-online-key or both")
        }
        var next = root.signed
        next.version += 1
        next.expires = now + lifetimes.root
        if let newRootKey {
            let id = try newRootKey.publicKey.keyID()
            next.keys[id] = newRootKey.publicKey
            next.roles["root"] = TUFRole(keyids: [id], threshold: 1)
        }
        if let newOnlineKey {
            let id = try newOnlineKey.publicKey.keyID()
            next.keys[id] = newOnlineKey.publicKey
            for role in ["timestamp", "snapshot", "targets"] { next.roles[role] = TUFRole(keyids: [id], threshold: 1) }
        }
        let used = Set(next.roles.values.flatMap(\.keyids))
        next.keys = next.keys.filter { used.contains($0.key) }
        var signers = [currentRootKey]
        if let newRootKey, try newRootKey.publicKey.keyID() != currentID { signers.append(newRootKey) }
        let signed = try Signed(signing: next, with: signers)
        try Self.write(signed, to: metadataDirectory + "/\(next.version).root.json")
        try Self.write(signed, to: metadataDirectory + "/root.json")
        root = signed
        if let newOnlineKey { try commit(targets: targets.signed.targets, key: newOnlineKey, lifetimes: lifetimes, now: now) }
    }

    /// The root metadata version.
    public var rootVersion: Int { root.signed.version }

    /// Refuses a key that the root does not name for the online roles.
    private func checkOnline(_ key: SigningKey) throws(PatchSyncError) {
        let id = try key.publicKey.keyID()
        for role in ["timestamp", "snapshot", "targets"] where !(root.signed.roles[role]?.keyids.contains(id) ?? false) {
            throw PatchSyncError(.usage, "the key \(id.prefix(12))… is not the \(role) key of \(origin)",
                                 remedy: "sign with the online key given to `patchsync repo init`")
        }
    }

    private static func write<T>(_ signed: Signed<T>, to path: String) throws(PatchSyncError) {
        try write(try signed.serialized(), to: path)
    }

    private static func write(_ data: Data, to path: String) throws(PatchSyncError) {
        do { try FileSystem.writeAtomically(data, to: path) } catch { throw PatchSyncError.wrap(error) }
    }

    private static func read<T>(_ path: String) throws(PatchSyncError) -> Signed<T> {
        try Signed(parsing: try FileSystem.read(path, limit: 64 << 20), name: path)
    }
}
