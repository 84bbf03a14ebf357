import Foundation

/// A public key as TUF metadata lists it.
public struct TUFKey: Codable, Hashable, Sendable {
    public var keytype: String
    public var scheme: String
    public var keyval: [String: String]

    /// The key id: SHA-256 of the key's canonical JSON, as the TUF specification defines it.
    public func keyID() throws(PatchSyncError) -> String {
        try SHA256Hasher.hash(Data(JSONValue.from(self).canonical())).hex
    }
}

/// A role's key ids and signature threshold.
public struct TUFRole: Codable, Hashable, Sendable {
    public var keyids: [String]
    public var threshold: Int
}

/// What every top-level role's signed part has in common.
protocol TUFSigned: Codable, Sendable {
    static var roleName: String { get }
    var type: String { get }
    var specVersion: String { get }
    var version: Int { get }
    var expires: Date { get }
}

/// The `signed` part of root metadata.
public struct RootMetadata: TUFSigned {
    static let roleName = "root"
    var type = "root"
    var specVersion = TUFVersion.spec
    var consistentSnapshot = true
    public var version: Int
    public var expires: Date
    public var keys: [String: TUFKey]
    public var roles: [String: TUFRole]

    enum CodingKeys: String, CodingKey {
        case type = "_type"
        case specVersion = "spec_version"
        case consistentSnapshot = "consistent_snapshot"
        case version, expires, keys, roles
    }
}

/// An entry of `meta` in timestamp and snapshot metadata.
public struct MetaFile: Codable, Hashable, Sendable {
    public var version: Int
    public var length: Int?
    public var hashes: [String: String]?
}

/// The `signed` part of timestamp metadata.
public struct TimestampMetadata: TUFSigned {
    static let roleName = "timestamp"
    var type = "timestamp"
    var specVersion = TUFVersion.spec
    public var version: Int
    public var expires: Date
    public var meta: [String: MetaFile]

    enum CodingKeys: String, CodingKey {
        case type = "_type"
        case specVersion = "spec_version"
        case version, expires, meta
    }
}

/// The `signed` part of snapshot metadata.
public struct SnapshotMetadata: TUFSigned {
    static let roleName = "snapshot"
    var type = "snapshot"
    var specVersion = TUFVersion.spec
    public var version: Int
    public var expires: Date
    public var meta: [String: MetaFile]

    enum CodingKeys: String, CodingKey {
        case type = "_type"
        case specVersion = "spec_version"
        case version, expires, meta
    }
}

/// A target file entry: its length, hashes and PatchSync's custom fields.
/// `custom` of another shape (a target some other tool published) decodes as nil
/// and is kept as it was, so it still re-encodes unchanged.
public struct TargetFile: Codable, Hashable, Sendable {
    public var length: Int64
    public var hashes: [String: String]
    public var custom: ManifestTargetInfo?
    /// The custom field of a channel's record (``ChannelRecord``), when the target is one.
    public var channelRecord: ChannelRecord?
    private var foreignCustom: JSONValue?

    public init(length: Int64, hashes: [String: String], custom: ManifestTargetInfo?) {
        self.length = length
        self.hashes = hashes
        self.custom = custom
    }

    public init(length: Int64, hashes: [String: String], channelRecord: ChannelRecord) {
        self.length = length
        self.hashes = hashes
        self.channelRecord = channelRecord
    }

    enum CodingKeys: String, CodingKey { case length, hashes, custom }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        length = try container.decode(Int64.self, forKey: .length)
        hashes = try container.decode([String: String].self, forKey: .hashes)
        custom = try? container.decodeIfPresent(ManifestTargetInfo.self, forKey: .custom)
        if custom == nil, let record = try? container.decodeIfPresent(ChannelRecord.self, forKey: .custom),
            record.record == "channel"
        {
            channelRecord = record
        }
        foreignCustom =
            custom == nil && channelRecord == nil ? try container.decodeIfPresent(JSONValue.self, forKey: .custom) : nil
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(length, forKey: .length)
        try container.encode(hashes, forKey: .hashes)
        if let custom {
            try container.encode(custom, forKey: .custom)
        } else if let channelRecord {
            try container.encode(channelRecord, forKey: .custom)
        } else {
            try container.encodeIfPresent(foreignCustom, forKey: .custom)
        }
    }
}

/// A role that targets metadata delegates to: its keys and threshold, and which
/// target paths it may sign (`paths` patterns or `path_hash_prefixes`).
public struct DelegatedRole: Codable, Hashable, Sendable {
    public var name: String
    public var keyids: [String]
    public var threshold: Int
    public var terminating: Bool
    public var paths: [String]?
    public var pathHashPrefixes: [String]?

    enum CodingKeys: String, CodingKey {
        case name, keyids, threshold, terminating, paths
        case pathHashPrefixes = "path_hash_prefixes"
    }

    var role: TUFRole { TUFRole(keyids: keyids, threshold: threshold) }

    /// Whether this role is trusted for `target` (spec 1.0.31, "delegations"): each `paths`
    /// pattern is matched segment by segment with shell wildcards, so `*` never crosses a `/`.
    func isTrusted(for target: String) -> Bool {
        if let paths { return paths.contains { Self.matches(pattern: $0, target) } }
        if let prefixes = pathHashPrefixes {
            let hash = SHA256Hasher.hash(Data(target.utf8)).hex
            return prefixes.contains { hash.hasPrefix($0) }
        }
        return false
    }

    static func matches(pattern: String, _ target: String) -> Bool {
        let patternParts = pattern.split(separator: "/", omittingEmptySubsequences: false)
        let targetParts = target.split(separator: "/", omittingEmptySubsequences: false)
        guard patternParts.count == targetParts.count else { return false }
        return zip(patternParts, targetParts).allSatisfy { fnmatch(String($0), String($1), 0) == 0 }
    }
}

/// Hash-bin delegation (TUF 1.0.31 `succinct_roles`): targets are spread over
/// 2^bit_length roles named `<prefix>-<bin in hex>` by the leading bits of SHA-256(path).
public struct SuccinctRoles: Codable, Hashable, Sendable {
    public var keyids: [String]
    public var threshold: Int
    public var bitLength: Int
    public var namePrefix: String

    enum CodingKeys: String, CodingKey {
        case keyids, threshold
        case bitLength = "bit_length"
        case namePrefix = "name_prefix"
    }

    /// The bin role that holds `target`; never terminating.
    func role(for target: String) -> DelegatedRole? {
        guard (1...32).contains(bitLength) else { return nil }
        let digest = Hex.decode(SHA256Hasher.hash(Data(target.utf8)).hex) ?? []
        let leading = digest.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let bin = bitLength == 32 ? leading : leading >> UInt32(32 - bitLength)
        let width = String((UInt64(1) << UInt64(bitLength)) - 1, radix: 16).count
        let hex = String(bin, radix: 16)
        let name = namePrefix + "-" + String(repeating: "0", count: max(0, width - hex.count)) + hex
        return DelegatedRole(
            name: name, keyids: keyids, threshold: threshold, terminating: true,
            paths: nil, pathHashPrefixes: nil)
    }
}

/// The `delegations` of targets metadata: keys and the roles, in priority order.
public struct Delegations: Codable, Hashable, Sendable {
    public var keys: [String: TUFKey]
    public var roles: [DelegatedRole]?
    public var succinctRoles: SuccinctRoles?

    enum CodingKeys: String, CodingKey {
        case keys, roles
        case succinctRoles = "succinct_roles"
    }

    /// The delegated roles trusted for `target`, in order.
    func roles(for target: String) -> [DelegatedRole] {
        if let succinctRoles { return succinctRoles.role(for: target).map { [$0] } ?? [] }
        return (roles ?? []).filter { $0.isTrusted(for: target) }
    }
}

/// The custom fields of a manifest target: which channel, build and sequence it is.
public struct ManifestTargetInfo: Codable, Hashable, Sendable {
    public var channel: String
    public var buildId: String
    public var sequence: Int
    /// Deltas of the manifest's JSON from recent builds' manifests: a player on one of those builds
    /// fetches a few hundred KiB instead of the whole manifest.
    public var manifestDeltas: [ManifestDelta]?
    /// The build's file count and size, for `repo status` without reading each manifest.
    public var files: Int?
    public var size: Int64?
    /// Set by `repo promote`: the channel the build was tested on.
    public var promotedFrom: String?
    /// Set by `repo rollback`: the build this one replaced on its channel, and why.
    public var rollback: RollbackNote?
    /// Set by `repo rollback` on the build it took off the channel: a later rollback never picks it.
    public var withdrawn: Bool?
    /// Set on a preload build: the target is its ``PreloadPlan`` (its manifest is sealed until released).
    public var preload: PreloadInfo?
    /// Who published the build, when, and what it is (kept when promote or rollback lists it again).
    public var published: PublishNote?

    public init(channel: String, buildId: String, sequence: Int, manifestDeltas: [ManifestDelta]? = nil) {
        self.channel = channel
        self.buildId = buildId
        self.sequence = sequence
        self.manifestDeltas = manifestDeltas
    }
}

/// Who published a build, when, and in their words what it is.
public struct PublishNote: Codable, Hashable, Sendable {
    public var at: Date
    /// A name the publisher gave (`--publisher`), or the host name of the machine that published.
    public var by: String
    public var description: String?

    /// The most a description may hold: it is signed into targets metadata, which players download.
    public static let maxDescriptionBytes = 1024

    public init(at: Date, by: String, description: String?) {
        self.at = at
        self.by = by
        self.description = description
    }

    /// Refuses a publisher name or description that `repo status` could not show on its line: control
    /// characters (a line break too), an empty name, more than ``maxDescriptionBytes``.
    public static func check(by name: String?, description: String?) throws(PatchSyncError) {
        for (what, text) in [("--publisher", name), ("--description", description)] {
            guard let text else { continue }
            let hidden: Set<Unicode.GeneralCategory> = [.control, .format, .lineSeparator, .paragraphSeparator]
            guard !text.unicodeScalars.contains(where: { hidden.contains($0.properties.generalCategory) }) else {
                throw PatchSyncError(
                    .usage, "\(what) holds a control or formatting character or a line break",
                    remedy: "give it as one line of plain text")
            }
            guard text.utf8.count <= maxDescriptionBytes, !text.trimmingCharacters(in: .whitespaces).isEmpty else {
                throw PatchSyncError(
                    .usage, "\(what) is empty or longer than \(maxDescriptionBytes) bytes (\(text.utf8.count))",
                    remedy: "give one line of up to \(maxDescriptionBytes) bytes; players download it with the metadata"
                )
            }
        }
    }
}

/// Why a channel went back to an earlier build: the build it left and the publisher's reason.
public struct RollbackNote: Codable, Hashable, Sendable {
    public var from: String
    public var reason: String?
    public init(from: String, reason: String?) {
        self.from = from
        self.reason = reason
    }
}

/// A ``Delta`` that rebuilds a manifest's JSON from the JSON of build `from`'s manifest, stored
/// zlib-deflated as the object named by its SHA-256. Signed targets metadata carries it, with the
/// SHA-256 and length of the JSON it must produce.
public struct ManifestDelta: Codable, Hashable, Sendable {
    public var from: String
    /// The stored object: its SHA-256 (its name) and length.
    public var object: String
    public var length: Int64
    /// The instructions' length once inflated (for `zstd`, the manifest's).
    public var size: Int
    /// The SHA-256 and length of the encoded manifest the delta builds (JSON up to format 7, binary from 8).
    public var sha256: String
    public var jsonLength: Int64
    /// Absent: our delta instructions (``Delta``), deflated. `zstd` (manifest format 8): one zstd frame
    /// compressed with the base build's encoded manifest as its prefix (`zstd --patch-from`).
    public var codec: String? = nil
}

/// The `signed` part of top-level targets metadata.
public struct TargetsMetadata: TUFSigned {
    static let roleName = "targets"
    var type = "targets"
    var specVersion = TUFVersion.spec
    public var version: Int
    public var expires: Date
    public var targets: [String: TargetFile]
    public var delegations: Delegations? = nil

    enum CodingKeys: String, CodingKey {
        case type = "_type"
        case specVersion = "spec_version"
        case version, expires, targets, delegations
    }
}

enum TUFVersion {
    static let spec = "1.0.31"
}

/// One signature of a metadata envelope.
public struct TUFSignature: Codable, Hashable, Sendable {
    public var keyid: String
    public var sig: String
}

/// Signed metadata as received or written: the envelope's signatures, the
/// exact `signed` value they cover, and that value decoded as `T`.
struct Signed<T: TUFSigned>: Sendable {
    let signatures: [TUFSignature]
    let raw: JSONValue
    let signed: T

    /// Parses an envelope and decodes its `signed` part, without verifying signatures.
    init(parsing data: Data, name: String) throws(PatchSyncError) {
        let envelope = try JSONValue.parse(data, what: name)
        guard let raw = envelope["signed"], let sigs = envelope["signatures"] else {
            throw PatchSyncError(.refusedData, "\(name) has no signed part or no signatures")
        }
        self.raw = raw
        self.signatures = try sigs.decode([TUFSignature].self, what: "\(name) signatures")
        var keyids = Set<String>()
        for signature in signatures where !keyids.insert(signature.keyid).inserted {
            throw PatchSyncError(
                .refusedData, "\(name) lists key id \(signature.keyid) twice in its signatures",
                remedy: "the origin serves malformed metadata; report it to the publisher")
        }
        self.signed = try raw.decode(T.self, what: name)
        guard signed.type == T.roleName else {
            throw PatchSyncError(.refusedData, "\(name) is \(signed.type) metadata, not \(T.roleName)")
        }
        guard let major = signed.specVersion.split(separator: ".").first, major == "1" else {
            throw PatchSyncError(
                .refusedData,
                "\(name) follows TUF specification \(signed.specVersion); "
                    + "PatchSync reads 1.x", remedy: "update PatchSync, or ask the publisher")
        }
    }

    /// Signs `value` with each key.
    init(signing value: T, with keys: [SigningKey]) throws(PatchSyncError) {
        self.signed = value
        self.raw = try JSONValue.from(value)
        let message = try raw.canonical()
        var signatures: [TUFSignature] = []
        for key in keys {
            signatures.append(
                TUFSignature(
                    keyid: try key.publicKey.keyID(),
                    sig: Hex.encode(try Ed25519.sign(message, privateKey: key.privateKey))))
        }
        self.signatures = signatures
    }

    /// The envelope as canonical JSON bytes, the form PatchSync writes.
    func serialized() throws(PatchSyncError) -> Data {
        let sigs = try JSONValue.from(signatures)
        return Data(try JSONValue.object(["signatures": sigs, "signed": raw]).canonical())
    }

    /// Checks that at least `role.threshold` distinct keys of `role` signed the canonical `signed` part.
    /// A key listed under two key ids counts once, however its hex is written (upper or lower case);
    /// a key of an unsupported type never counts.
    func verify(role: TUFRole, keys: [String: TUFKey], name: String) throws(PatchSyncError) {
        let message = try raw.canonical()
        var validIDs = Set<String>(), validKeys = Set<String>()
        for signature in signatures where role.keyids.contains(signature.keyid) && !validIDs.contains(signature.keyid) {
            guard let key = keys[signature.keyid], let text = key.keyval["public"] else { continue }
            let material = Hex.decode(text).map { Hex.encode($0) } ?? text  // one spelling per key
            guard !validKeys.contains(material), let sig = Hex.decode(signature.sig) else { continue }
            if PublicKeySignature.verify(sig, message: message, key: key) {
                validIDs.insert(signature.keyid)
                validKeys.insert(material)
            }
        }
        guard role.threshold >= 1, validKeys.count >= role.threshold else {
            throw PatchSyncError(
                .refusedData,
                "\(name) has \(validKeys.count) valid signature(s), \(role.threshold) required",
                remedy: "the origin serves metadata not signed by the trusted keys; check the mirror")
        }
    }
}

/// A private key with its public part: what the publisher signs with.
public struct SigningKey: Sendable {
    public let publicKey: TUFKey
    let privateKey: [UInt8]

    public init(_ pair: Ed25519.KeyPair) {
        publicKey = TUFKey(keytype: "ed25519", scheme: "ed25519", keyval: ["public": Hex.encode(pair.publicKey)])
        privateKey = pair.privateKey
    }

    /// The key file form: securesystemslib's JSON with the private half in `keyval`.
    public func fileData() throws(PatchSyncError) -> Data {
        var key = publicKey
        key.keyval["private"] = Hex.encode(privateKey)
        return Data(try JSONValue.from(key).canonical())
    }

    /// Reads a key file written by ``fileData()``.
    public static func load(path: String) throws(PatchSyncError) -> SigningKey {
        if let st = try? FileSystem.status(path), st.st_mode & 0o077 != 0 {
            throw PatchSyncError(
                .usage, "\(path) is readable by others (mode \(String(st.st_mode & 0o777, radix: 8)))",
                remedy: "a private key must be private: chmod 600 \(path)")
        }
        let data = try FileSystem.read(path, limit: 64 * 1024)
        let key = try JSONValue.parse(data, what: path).decode(TUFKey.self, what: "key file \(path)")
        guard key.keytype == "ed25519", let pub = key.keyval["public"].flatMap(Hex.decode),
            let priv = key.keyval["private"].flatMap(Hex.decode), pub.count == 32, priv.count == 32
        else {
            throw PatchSyncError(
                .usage, "\(path) is not an Ed25519 private key file",
                remedy: "use a key written by `patchsync keygen`")
        }
        return SigningKey(Ed25519.KeyPair(publicKey: pub, privateKey: priv))
    }
}
