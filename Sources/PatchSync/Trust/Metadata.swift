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
        case type = "_type", specVersion = "spec_version", consistentSnapshot = "consistent_snapshot"
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
        case type = "_type", specVersion = "spec_version", version, expires, meta
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
        case type = "_type", specVersion = "spec_version", version, expires, meta
    }
}

/// A target file entry: its length, hashes and PatchSync's custom fields.
public struct TargetFile: Codable, Hashable, Sendable {
    public var length: Int64
    public var hashes: [String: String]
    public var custom: ManifestTargetInfo?
}

/// The custom fields of a manifest target: which channel, build and sequence it is.
public struct ManifestTargetInfo: Codable, Hashable, Sendable {
    public var channel: String
    public var buildId: String
    public var sequence: Int
}

/// The `signed` part of top-level targets metadata.
public struct TargetsMetadata: TUFSigned {
    static let roleName = "targets"
    var type = "targets"
    var specVersion = TUFVersion.spec
    public var version: Int
    public var expires: Date
    public var targets: [String: TargetFile]
    var delegations: JSONValue?

    enum CodingKeys: String, CodingKey {
        case type = "_type", specVersion = "spec_version", version, expires, targets, delegations
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
        self.signed = try raw.decode(T.self, what: name)
        guard signed.type == T.roleName else {
            throw PatchSyncError(.refusedData, "\(name) is \(signed.type) metadata, not \(T.roleName)")
        }
    }

    /// Signs `value` with each key.
    init(signing value: T, with keys: [SigningKey]) throws(PatchSyncError) {
        self.signed = value
        self.raw = try JSONValue.from(value)
        let message = try raw.canonical()
        var signatures: [TUFSignature] = []
        for key in keys {
            signatures.append(TUFSignature(keyid: try key.publicKey.keyID(),
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
    func verify(role: TUFRole, keys: [String: TUFKey], name: String) throws(PatchSyncError) {
        let message = try raw.canonical()
        var valid = Set<String>()
        for signature in signatures where role.keyids.contains(signature.keyid) && !valid.contains(signature.keyid) {
            guard let key = keys[signature.keyid], try key.keyID() == signature.keyid else { continue }
            if Self.check(signature, message: message, key: key) { valid.insert(signature.keyid) }
        }
        guard role.threshold >= 1, valid.count >= role.threshold else {
            throw PatchSyncError(.refusedData,
                                 "\(name) has \(valid.count) valid signature(s), \(role.threshold) required",
                                 remedy: "the origin serves metadata not signed by the trusted keys; check the mirror")
        }
    }

    private static func check(_ signature: TUFSignature, message: [UInt8], key: TUFKey) -> Bool {
        guard key.keytype == "ed25519", key.scheme == "ed25519",
              let pub = key.keyval["public"].flatMap(Hex.decode),
              let sig = Hex.decode(signature.sig) else { return false }
        return Ed25519.verify(sig, message: message, publicKey: pub)
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
            throw PatchSyncError(.usage, "\(path) is readable by others (mode \(String(st.st_mode & 0o777, radix: 8)))",
                                 remedy: "a private key must be private: chmod 600 \(path)")
        }
        let data = try FileSystem.read(path, limit: 64 * 1024)
        let key = try JSONValue.parse(data, what: path).decode(TUFKey.self, what: "key file \(path)")
        guard key.keytype == "ed25519", let pub = key.keyval["public"].flatMap(Hex.decode),
              let priv = key.keyval["private"].flatMap(Hex.decode), pub.count == 32, priv.count == 32 else {
            throw PatchSyncError(.usage, "\(path) is not an Ed25519 private key file",
                                 remedy: "use a key written by `patchsync keygen`")
        }
        return SigningKey(Ed25519.KeyPair(publicKey: pub, privateKey: priv))
    }
}
