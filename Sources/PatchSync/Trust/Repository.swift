import Foundation

/// The publisher's side of the trust chain: writes and re-signs the TUF
/// metadata of an origin folder, with consistent snapshots (nothing but
/// `timestamp.json` and the `root.json` convenience copy is ever overwritten).
///
/// The roles have separate keys, as TUF means them: the root keys (offline) sign root, the targets
/// keys sign what builds exist (publish, promote, rollback), and one online key signs snapshot and
/// timestamp (the cron job that keeps them fresh holds only that one).
public struct Repository: Sendable {
    /// How long each role's metadata stays valid after it is signed. A cron'd `repo refresh` renews
    /// snapshot and timestamp; targets and root are renewed by a publish or by `repo renew`. Renewing
    /// both once a year leaves a quarter (targets) and a year (root) of slack before any client refuses.
    public struct Lifetimes: Sendable {
        public var root: TimeInterval = 730 * 86400
        public var targets: TimeInterval = 455 * 86400
        public var snapshot: TimeInterval = 30 * 86400
        public var timestamp: TimeInterval = 7 * 86400
        public init() {}
    }

    /// The private keys a change is signed with: only those the change needs.
    public struct Signers: Sendable {
        public var root: [SigningKey]
        public var targets: [SigningKey]
        public var online: SigningKey?

        public init(root: [SigningKey] = [], targets: [SigningKey] = [], online: SigningKey? = nil) {
            self.root = root
            self.targets = targets
            self.online = online
        }
    }

    /// A root's keys and thresholds, for `create` and `rotateRoot`.
    public struct KeySet: Sendable {
        public var root: [TUFKey]
        public var rootThreshold: Int
        public var targets: [TUFKey]
        public var targetsThreshold: Int
        public var online: TUFKey

        /// Thresholds default to every key given: several keys then mean several signatures.
        public init(
            root: [TUFKey], rootThreshold: Int? = nil, targets: [TUFKey], targetsThreshold: Int? = nil,
            online: TUFKey
        ) {
            self.root = root
            self.rootThreshold = rootThreshold ?? root.count
            self.targets = targets
            self.targetsThreshold = targetsThreshold ?? targets.count
            self.online = online
        }
    }

    public let origin: String
    var root: Signed<RootMetadata>
    var targets: Signed<TargetsMetadata>
    var snapshot: Signed<SnapshotMetadata>
    var timestamp: Signed<TimestampMetadata>
    /// The delegated `releases` role's metadata (released content keys), once a preload was published.
    var releases: Signed<TargetsMetadata>? = nil
    /// Timestamp or snapshot is still signed by the online key of the root before the newest: a rotation
    /// of the online key stopped after it wrote the new root (killed, or its commit to a bucket lost the
    /// race). Loaded all the same, so that `repo refresh` with the new key can sign them again.
    public internal(set) var onlineSignedByPreviousRoot = false
    /// Held from `open` until the value goes: the origin is this process's to change.
    var lock: OriginLock? = nil

    /// The names of the origin folder.
    var layout: OriginLayout { OriginLayout(root: origin) }

    /// Creates a repository in `origin` with the roles' keys in `keys`; `signers` holds the private root
    /// keys (at least the root threshold), targets keys (at least the targets threshold) and the online key.
    public static func create(
        origin: String, keys: KeySet, signers: Signers,
        lifetimes: Lifetimes = .init(), now: Date = Date()
    ) throws(PatchSyncError) -> Repository {
        try OriginLayout.refuseURL(origin)
        let layout = OriginLayout(root: origin)
        guard !FileSystem.exists(layout.rootMetadataFile) else {
            throw PatchSyncError(
                .usage, "\(origin) already holds a repository",
                remedy: "publish into it, or choose an empty folder for a new one")
        }
        let rootMeta = try Self.rootMetadata(version: 1, expires: now + lifetimes.root, keys: keys)
        let root = try Signed(
            signing: rootMeta,
            with: try Self.signing(
                signers.root, role: "root", of: rootMeta,
                origin: origin))
        try write(root, to: layout.path(OriginLayout.metadata(role: "root", version: 1)))
        try write(root, to: layout.rootMetadataFile)
        var repo = Repository(
            origin: origin, root: root,
            targets: try Signed(
                signing: TargetsMetadata(version: 0, expires: now, targets: [:]),
                with: []),
            snapshot: try Signed(
                signing: SnapshotMetadata(version: 0, expires: now, meta: [:]),
                with: []),
            timestamp: try Signed(
                signing: TimestampMetadata(version: 0, expires: now, meta: [:]),
                with: []))
        try repo.commit(targets: [:], signers: signers, lifetimes: lifetimes, now: now)
        return repo
    }

    /// A repository with one root key, one targets key and one online key.
    public static func create(
        origin: String, rootKey: SigningKey, targetsKey: SigningKey, onlineKey: SigningKey,
        lifetimes: Lifetimes = .init(), now: Date = Date()
    ) throws(PatchSyncError) -> Repository {
        try create(
            origin: origin,
            keys: KeySet(
                root: [rootKey.publicKey], targets: [targetsKey.publicKey],
                online: onlineKey.publicKey),
            signers: Signers(root: [rootKey], targets: [targetsKey], online: onlineKey),
            lifetimes: lifetimes, now: now)
    }

    /// Root metadata for `keys`, checked: thresholds within the keys given, and no key in two of the
    /// three roles (the online key lives on an always-on host; the targets key must not).
    static func rootMetadata(version: Int, expires: Date, keys: KeySet) throws(PatchSyncError) -> RootMetadata {
        var all: [String: TUFKey] = [:]
        func ids(_ keys: [TUFKey], _ role: String, threshold: Int) throws(PatchSyncError) -> TUFRole {
            var ids: [String] = []
            for key in keys {
                let id = try key.keyID()
                if !ids.contains(id) { ids.append(id) }
                all[id] = key
            }
            guard !ids.isEmpty, threshold >= 1, threshold <= ids.count else {
                throw PatchSyncError(
                    .usage, "the \(role) role has \(ids.count) distinct key(s) and a threshold of \(threshold)",
                    remedy: "give at least one --\(role)-key and a --\(role)-threshold between 1 and their number")
            }
            return TUFRole(keyids: ids, threshold: threshold)
        }
        let root = try ids(keys.root, "root", threshold: keys.rootThreshold)
        let targets = try ids(keys.targets, "targets", threshold: keys.targetsThreshold)
        let online = try ids([keys.online], "online", threshold: 1)
        let pairs = [("a root", root), ("a targets", targets), ("an online", online)]
        for (i, a) in pairs.enumerated() {
            for b in pairs[(i + 1)...] {
                if let shared = a.1.keyids.first(where: b.1.keyids.contains) {
                    throw PatchSyncError(
                        .usage, "the key \(shared.prefix(12))… is given as \(a.0) key and as \(b.0) key",
                        remedy: "each role needs its own key (`patchsync keygen` writes root.key, targets.key "
                            + "and online.key): the online key sits on an always-on host, the others must not")
                }
            }
        }
        return RootMetadata(
            version: version, expires: expires, keys: all,
            roles: ["root": root, "targets": targets, "timestamp": online, "snapshot": online])
    }

    /// Locks the origin (``OriginLock``), then loads it as ``load(origin:)`` does: for commands that
    /// change it. The lock lasts as long as the returned value (and its copies).
    /// `finishingRotation`: the command is the refresh that signs snapshot and timestamp with the new
    /// online key after a rotation stopped half way (``onlineSignedByPreviousRoot``); every other command
    /// refuses to sign on top of them until then.
    public static func open(origin: String, for purpose: String, finishingRotation: Bool = false)
        throws(PatchSyncError) -> Repository
    {
        // its "no repository" error
        guard FileSystem.exists(OriginLayout(root: origin).metadataFolder) else { return try load(origin: origin) }
        let lock = try OriginLock(origin: origin, purpose: purpose)
        var repo = try load(origin: origin)
        repo.lock = lock
        guard !repo.onlineSignedByPreviousRoot || finishingRotation else {
            throw PatchSyncError(
                .refusedData,
                "snapshot and timestamp of \(origin) are still signed by the online key that root version "
                    + "\(repo.rootVersion) replaced (a rotation stopped half way); \(purpose) would sign on top of them",
                remedy: "run `patchsync repo refresh --origin \(origin) --online-key NEW_ONLINE_KEY` first")
        }
        return repo
    }

    /// Refuses unless `snapshot` and `targets` are the newest versions of their roles in the metadata folder.
    private static func requireNewest(_ layout: OriginLayout, snapshot: Int, targets: Int, _ path: String)
        throws(PatchSyncError)
    {
        let names = (try? FileSystem.list(layout.metadataFolder)) ?? []
        func newest(_ role: String) -> Int {
            names.compactMap { OriginLayout.version(ofMetadataName: $0, role: role) }.max() ?? 0
        }
        guard newest("snapshot") <= snapshot, newest("targets") <= targets else {
            throw tampered(path, "is signed by a replaced online key and is not the newest snapshot")
        }
    }

    /// The newest root, walked version by version from 1 (each signed by its predecessor's keys and its
    /// own), and the one before it.
    private static func rootChain(_ versioned: (String, Int) -> String) throws(PatchSyncError) -> (
        Signed<RootMetadata>, RootMetadata?
    ) {
        var root: Signed<RootMetadata> = try read(versioned("root", 1))
        try verify(root, role: "root", of: root.signed, versioned("root", 1))
        var previous: RootMetadata?
        while FileSystem.exists(versioned("root", root.signed.version + 1)) {
            let path = versioned("root", root.signed.version + 1)
            let next: Signed<RootMetadata> = try read(path)
            guard next.signed.version == root.signed.version + 1 else { throw tampered(path, "holds another version") }
            try verify(next, role: "root", of: root.signed, path)
            try verify(next, role: "root", of: next.signed, path)
            previous = root.signed
            root = next
        }
        return (root, previous)
    }

    /// Loads the repository's current metadata from `origin` and checks it as a client would before
    /// anything is signed on top of it: the root chain from version 1, timestamp, snapshot and targets
    /// by their signatures and by the versions, lengths and hashes that pin them. A targets.json that a
    /// stolen online key or a hand edit put there is refused, so a publish never signs it with the
    /// targets key. Targets still signed by the previous root's targets keys (a rotation stopped before
    /// it re-signed them) load, and the next commit signs them with the current keys.
    public static func load(origin: String) throws(PatchSyncError) -> Repository {
        try OriginLayout.refuseURL(origin)
        let layout = OriginLayout(root: origin)
        func versioned(_ role: String, _ version: Int) -> String {
            layout.path(OriginLayout.metadata(role: role, version: version))
        }
        guard FileSystem.exists(layout.timestampFile) else {
            throw PatchSyncError(
                .usage, "\(origin) holds no PatchSync repository",
                remedy: "create one with `patchsync repo init --origin \(origin) …`")
        }
        let (root, previous) = try rootChain(versioned)
        // A rotation of the online key that stopped after the new root: the previous root's key still counts
        // for snapshot and timestamp, until they are signed again.
        var byPrevious = false
        func verifyOnline<T: TUFSigned>(_ signed: Signed<T>, _ role: String, _ path: String) throws(PatchSyncError) {
            do { try verify(signed, role: role, of: root.signed, path) } catch {
                guard let previous, previous.roles[role] != root.signed.roles[role] else { throw error }
                try verify(signed, role: role, of: previous, path)
                byPrevious = true
            }
        }
        let (timestamp, _): (Signed<TimestampMetadata>, Data) = try readPinned(layout.timestampFile, pin: nil)
        try verifyOnline(timestamp, "timestamp", layout.timestampFile)
        guard let snapPin = timestamp.signed.meta[OriginLayout.snapshotName] else {
            throw tampered(layout.timestampFile, "names no snapshot")
        }
        let snapPath = versioned("snapshot", snapPin.version)
        let (snapshot, _): (Signed<SnapshotMetadata>, Data) = try readPinned(snapPath, pin: snapPin)
        try verifyOnline(snapshot, "snapshot", snapPath)
        guard let targetsPin = snapshot.signed.meta[OriginLayout.targetsName] else {
            throw tampered(snapPath, "names no targets")
        }
        let targetsPath = versioned("targets", targetsPin.version)
        let (targets, _): (Signed<TargetsMetadata>, Data) = try readPinned(targetsPath, pin: targetsPin)
        do { try verify(targets, role: "targets", of: root.signed, targetsPath) } catch {
            guard let previous, previous.roles["targets"] != root.signed.roles["targets"] else { throw error }
            try verify(targets, role: "targets", of: previous, targetsPath)
        }
        if byPrevious {
            // Only the state the rotation stopped in: the newest snapshot and targets on disk. An older one
            // signed with a replaced key (a leaked one, say) is refused as any tampering is.
            try requireNewest(layout, snapshot: snapPin.version, targets: targetsPin.version, snapPath)
        }
        var repo = Repository(origin: origin, root: root, targets: targets, snapshot: snapshot, timestamp: timestamp)
        repo.onlineSignedByPreviousRoot = byPrevious
        if let pin = snapshot.signed.meta[OriginLayout.metaKey(role: Releases.role)] {
            let path = versioned(Releases.role, pin.version)
            let (releases, _): (Signed<TargetsMetadata>, Data) = try readPinned(path, pin: pin)
            guard let role = targets.signed.delegations?.roles?.first(where: { $0.name == Releases.role }) else {
                throw tampered(path, "is listed, but targets delegates no \(Releases.role) role")
            }
            do { try releases.verify(role: role.role, keys: targets.signed.delegations?.keys ?? [:], name: path) } catch
            {
                throw tampered(path, error.message)
            }
            repo.releases = releases
        }
        return repo
    }

    /// Whether targets.json still needs signing by the current root's targets keys.
    public var targetsSignedByCurrentKeys: Bool {
        guard let role = root.signed.roles["targets"] else { return false }
        return (try? targets.verify(role: role, keys: root.signed.keys, name: OriginLayout.targetsName)) != nil
    }

    private static func verify<T>(
        _ signed: Signed<T>, role: String, of root: RootMetadata,
        _ path: String
    ) throws(PatchSyncError) {
        guard let spec = root.roles[role] else {
            throw tampered(path, "is checked against a root with no \(role) role")
        }
        do { try signed.verify(role: spec, keys: root.keys, name: path) } catch { throw tampered(path, error.message) }
    }

    private static func readPinned<T>(_ path: String, pin: MetaFile?) throws(PatchSyncError) -> (Signed<T>, Data) {
        let data = try FileSystem.read(path, limit: 64 << 20)
        if let pin {
            if let length = pin.length, length != data.count {
                throw tampered(path, "is \(data.count) bytes, \(length) signed")
            }
            if let hash = pin.hashes?["sha256"], hash != SHA256Hasher.hash(data).hex {
                throw tampered(path, "has another SHA-256 than signed")
            }
        }
        let signed: Signed<T> = try Signed(parsing: data, name: path)
        return (signed, data)
    }

    static func tampered(_ path: String, _ what: String) -> PatchSyncError {
        PatchSyncError(
            .refusedData, "\(path) \(what): the origin's metadata is not what patchsync signed",
            remedy: "nothing was signed on top of it; restore the origin's metadata folder from your own copy "
                + "(it may have been changed by hand or by someone holding the online key)")
    }

    /// The current targets.
    public var targetFiles: [String: TargetFile] { targets.signed.targets }

    /// Writes new targets, snapshot and timestamp metadata, in that order, so a client never sees a
    /// timestamp that points at metadata not yet there. Targets is signed by `signers.targets` (at least
    /// the targets threshold of them), snapshot and timestamp by `signers.online`.
    mutating func commit(
        targets files: [String: TargetFile], signers: Signers,
        lifetimes: Lifetimes = .init(), now: Date = Date(),
        delegatingReleases: Bool = false
    ) throws(PatchSyncError) {
        try checkSigners(signers)
        guard let online = signers.online else {
            throw PatchSyncError(.internal, "checkSigners passed without an online key")
        }
        let delegations = try releasesDelegation(
            online: online,
            adding: delegatingReleases || targets.signed.delegations != nil)
        let newTargets = try Signed(
            signing: TargetsMetadata(
                version: targets.signed.version + 1,
                expires: now + lifetimes.targets, targets: files,
                delegations: delegations),
            with: try Self.signing(signers.targets, role: "targets", of: root.signed, origin: origin))
        try Self.write(
            newTargets, to: layout.path(OriginLayout.metadata(role: "targets", version: newTargets.signed.version)))
        let releasesKeys = delegations?.roles?.first { $0.name == Releases.role }?.keyids
        let resignReleases =
            releasesKeys != nil
            && (releases == nil
                || releasesKeys != targets.signed.delegations?.roles?.first { $0.name == Releases.role }?.keyids)
        targets = newTargets
        // The releases role's metadata exists from its delegation on (empty until a release), signed by
        // the key the delegation names now, so a client's search of it always finds it in snapshot.
        if resignReleases { try signReleases(releasedKeys, online: online, lifetimes: lifetimes, now: now) }
        try resign(key: online, lifetimes: lifetimes, now: now)
    }

    /// Refuses, before any work, keys that cannot sign a change of targets: too few targets keys of
    /// this root, or no online key of it.
    public func checkSigners(_ signers: Signers) throws(PatchSyncError) {
        _ = try Self.signing(signers.targets, role: "targets", of: root.signed, origin: origin)
        guard let online = signers.online else {
            throw PatchSyncError(
                .usage, "no online key given", remedy: "give --online-key (it signs snapshot and timestamp)")
        }
        try checkOnline(online)
    }

    /// Re-signs snapshot and timestamp with new versions and expiry: the publisher's cron job, which
    /// holds only the online key.
    /// With `contentKeys` (the publisher's key folder), it also releases each preload build whose release
    /// time has come, from its key file there: the cron job unlocks builds on time without the targets key.
    /// A due build whose key file is not there is reported (``RefreshOutcome/missingKeys``); snapshot and
    /// timestamp are re-signed all the same, so clients never see metadata expire over it.
    @discardableResult
    public mutating func refresh(
        key: SigningKey, lifetimes: Lifetimes = .init(), now: Date = Date(),
        contentKeys: String? = nil
    ) throws(PatchSyncError) -> RefreshOutcome {
        try checkOnline(key)
        var outcome = RefreshOutcome()
        // Each due build on its own: one that cannot be released (its key missing or wrong, an earlier
        // preload it shares content with not released) is reported, and the others and the re-signing
        // go on, so a refresh never stops keeping the repository's metadata fresh.
        for due in dueReleases(now: now) {
            guard let contentKeys else {
                outcome.missingKeys.append("\(due.channel)/\(due.build)")
                continue
            }
            let path = Self.contentKeyPath(contentKeys, channel: due.channel, build: due.build)
            guard FileSystem.exists(path) else {
                outcome.missingKeys.append(path)
                continue
            }
            do throws(PatchSyncError) {
                try release(
                    keyFile: try FileSystem.read(path, limit: Int(Releases.maxKeyBytes)), channel: due.channel,
                    build: due.build, online: key, lifetimes: lifetimes, now: now, resigning: false)
                outcome.released.append("\(due.channel)/\(due.build)")
            } catch {
                outcome.failed.append("\(due.channel)/\(due.build): \(error.message)")
            }
        }
        // Only while the delegation names this key: otherwise clients would refuse what it signs.
        if let releases, releases.signed.expires.timeIntervalSince(now) < lifetimes.targets / 2,
            delegatesReleases(to: key)
        {
            try signReleases(releases.signed.targets, online: key, lifetimes: lifetimes, now: now)
        }
        try resign(key: key, lifetimes: lifetimes, now: now)
        return outcome
    }

    /// Whether targets delegates the releases role to `key`.
    func delegatesReleases(to key: SigningKey) -> Bool {
        guard let id = try? key.publicKey.keyID() else { return false }
        return targets.signed.delegations?.roles?.first { $0.name == Releases.role }?.keyids.contains(id) ?? false
    }

    /// What a refresh released, and the due builds whose key it could not find.
    public struct RefreshOutcome: Sendable, Codable {
        public var released: [String] = []
        public var missingKeys: [String] = []
        /// Due builds that could not be released, with why.
        public var failed: [String] = []
    }

    /// Signs the same targets again as a new version with a fresh expiry (the targets keys' yearly
    /// renewal), then snapshot and timestamp.
    public mutating func renewTargets(signers: Signers, lifetimes: Lifetimes = .init(), now: Date = Date())
        throws(PatchSyncError)
    {
        try commit(targets: targets.signed.targets, signers: signers, lifetimes: lifetimes, now: now)
    }

    mutating func resign(key: SigningKey, lifetimes: Lifetimes, now: Date) throws(PatchSyncError) {
        // Pinned by length and hash as well as version: a client then reads targets.json up to its
        // signed length (not a fixed cap), and a mirror cannot swap its bytes.
        let targetsData = try targets.serialized()
        var meta = [
            OriginLayout.targetsName: MetaFile(
                version: targets.signed.version, length: targetsData.count,
                hashes: ["sha256": SHA256Hasher.hash(targetsData).hex])
        ]
        if let releases {
            let data = try releases.serialized()
            meta[OriginLayout.metaKey(role: Releases.role)] = MetaFile(
                version: releases.signed.version, length: data.count,
                hashes: ["sha256": SHA256Hasher.hash(data).hex])
        }
        let snap = try Signed(
            signing: SnapshotMetadata(
                version: snapshot.signed.version + 1, expires: now + lifetimes.snapshot, meta: meta), with: [key])
        let snapData = try snap.serialized()
        try Self.write(snapData, to: layout.path(OriginLayout.metadata(role: "snapshot", version: snap.signed.version)))
        let stamp = try Signed(
            signing: TimestampMetadata(
                version: timestamp.signed.version + 1, expires: now + lifetimes.timestamp,
                meta: [
                    OriginLayout.snapshotName: MetaFile(
                        version: snap.signed.version, length: snapData.count,
                        hashes: ["sha256": SHA256Hasher.hash(snapData).hex])
                ]), with: [key])
        try Self.write(stamp, to: layout.timestampFile)
        snapshot = snap
        timestamp = stamp
    }

    /// The root metadata version.
    public var rootVersion: Int { root.signed.version }
    /// The current targets and snapshot versions.
    public var targetsVersion: Int { targets.signed.version }
    public var snapshotVersion: Int { snapshot.signed.version }

    /// The keys of `keys` that `role` of `root` lists, one per key id, at least its threshold of them.
    /// A key that the role does not list is refused by name, unless `ignoringOthers` (a rotation passes
    /// the old and the new root keys together).
    static func signing(
        _ keys: [SigningKey], role: String, of root: RootMetadata, origin: String,
        ignoringOthers: Bool = false
    ) throws(PatchSyncError) -> [SigningKey] {
        guard let spec = root.roles[role] else {
            throw PatchSyncError(.refusedData, "the root of \(origin) has no \(role) role")
        }
        var chosen: [SigningKey] = [], ids = Set<String>(), stranger: String?
        for key in keys {
            let id = try key.publicKey.keyID()
            guard spec.keyids.contains(id) else {
                stranger = stranger ?? id
                if ignoringOthers { continue }
                break
            }
            if ids.insert(id).inserted { chosen.append(key) }
        }
        if let stranger, !ignoringOthers || chosen.isEmpty {
            throw PatchSyncError(
                .usage, "the key \(stranger.prefix(12))… is not a \(role) key of \(origin)",
                remedy: "sign with the \(role) key(s) the repository was created with (or last rotated to)")
        }
        guard chosen.count >= spec.threshold else {
            throw PatchSyncError(
                .usage,
                "the \(role) role of \(origin) needs \(spec.threshold) signatures of its "
                    + "\(spec.keyids.count) keys; \(chosen.count) of them given",
                remedy: "give --\(role)-key once for each of \(spec.threshold) of its keys")
        }
        return chosen
    }

    /// Refuses a key that the root does not name for timestamp and snapshot.
    func checkOnline(_ key: SigningKey) throws(PatchSyncError) {
        let id = try key.publicKey.keyID()
        for role in ["timestamp", "snapshot"] where !(root.signed.roles[role]?.keyids.contains(id) ?? false) {
            throw PatchSyncError(
                .usage, "the key \(id.prefix(12))… is not the \(role) key of \(origin)",
                remedy: "sign with the online key given to `patchsync repo init` (or last rotated to)")
        }
    }

    static func write<T>(_ signed: Signed<T>, to path: String) throws(PatchSyncError) {
        try write(try signed.serialized(), to: path)
    }

    static func write(_ data: Data, to path: String) throws(PatchSyncError) {
        do { try FileSystem.writeAtomically(data, to: path) } catch { throw PatchSyncError.wrap(error) }
    }

    private static func read<T>(_ path: String) throws(PatchSyncError) -> Signed<T> {
        try Signed(parsing: try FileSystem.read(path, limit: 64 << 20), name: path)
    }
}
