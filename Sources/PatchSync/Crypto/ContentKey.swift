internal import CLibCrypto
import Foundation

/// The AES-256 key that seals a preload build's new content until its release (AES-256-GCM through
/// libcrypto). One fresh key per build; it stays in the publisher's key folder until `repo release`
/// (or `repo refresh` after the release time) puts it in signed metadata.
public struct ContentKey: Sendable, Equatable {
    public static let byteCount = 32
    static let tagBytes = 16
    static let nonceBytes = 12
    let bytes: [UInt8]

    init(bytes: [UInt8]) throws(PatchSyncError) {
        guard bytes.count == Self.byteCount else {
            throw PatchSyncError(.refusedData, "a content key has \(bytes.count) bytes, not \(Self.byteCount)")
        }
        self.bytes = bytes
    }

    /// A fresh random key (libcrypto's RAND_bytes).
    static func generate() throws(PatchSyncError) -> ContentKey {
        var bytes = [UInt8](repeating: 0, count: byteCount)
        guard RAND_bytes(&bytes, Int32(byteCount)) == 1 else {
            throw PatchSyncError(.internal, "libcrypto could not produce random bytes for a content key")
        }
        return try ContentKey(bytes: bytes)
    }

    /// What signed targets metadata pins for a preload build: a hash of the key and the build it seals,
    /// so a released key is checked (a wrong key, or another build's) before anything is decrypted.
    /// GCM alone does not commit to its key.
    func commitment(build: String) -> String {
        var data = Data("patchsync content key commitment 1\0\(build)\0".utf8)
        data.append(contentsOf: bytes)
        return SHA256Hasher.hash(data).hex
    }

    /// The nonce of one sealed unit: derived from the object and the unit's index, so it is unique per
    /// key as long as an object is sealed once per key (each build's new objects are).
    static func nonce(object: String, unit: Int) -> [UInt8] {
        Array(SHA256Hasher.hash(Data("patchsync nonce 1\0\(object)\0\(unit)".utf8)).hexBytes.prefix(nonceBytes))
    }

    /// The associated data of one unit: the build, the object, the unit's index and the unit count, so a
    /// unit moved to another place, object or build, or an object cut short, fails authentication.
    static func associatedData(build: String, object: String, unit: Int, of units: Int) -> [UInt8] {
        Array("patchsync sealed 1\0\(build)\0\(object)\0\(unit)\0\(units)".utf8)
    }

    /// `plain` sealed: ciphertext of the same length followed by the 16-byte tag, written to `out`
    /// (at least `plain.count + 16` bytes).
    func seal(
        _ plain: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8],
        into out: UnsafeMutableRawBufferPointer
    ) throws(PatchSyncError) {
        guard let context = EVP_CIPHER_CTX_new() else { throw PatchSyncError(.internal, "EVP_CIPHER_CTX_new failed") }
        defer { EVP_CIPHER_CTX_free(context) }
        var length: Int32 = 0
        guard let base = out.baseAddress?.assumingMemoryBound(to: UInt8.self) else {
            throw PatchSyncError(.internal, "sealing into an empty buffer")
        }
        var ok =
            EVP_EncryptInit_ex(context, EVP_aes_256_gcm(), nil, nil, nil) == 1
            && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_IVLEN, Int32(Self.nonceBytes), nil) == 1
            && EVP_EncryptInit_ex(context, nil, nil, bytes, nonce) == 1
            && EVP_EncryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1
        if ok, let input = plain.baseAddress?.assumingMemoryBound(to: UInt8.self), plain.count > 0 {
            ok = EVP_EncryptUpdate(context, base, &length, input, Int32(plain.count)) == 1
        }
        ok =
            ok && EVP_EncryptFinal_ex(context, base + plain.count, &length) == 1
            && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(Self.tagBytes), base + plain.count) == 1
        guard ok else { throw PatchSyncError(.internal, "AES-256-GCM sealing failed in libcrypto") }
    }

    /// Opens one sealed unit (ciphertext then tag) into `out` (at least `sealed.count - 16` bytes);
    /// false when the tag does not authenticate it under this key, nonce and associated data.
    func open(
        _ sealed: UnsafeRawBufferPointer, nonce: [UInt8], aad: [UInt8],
        into out: UnsafeMutableRawBufferPointer
    ) -> Bool {
        guard sealed.count >= Self.tagBytes, out.count >= sealed.count - Self.tagBytes,
            let input = sealed.baseAddress?.assumingMemoryBound(to: UInt8.self),
            let context = EVP_CIPHER_CTX_new()
        else { return false }
        defer { EVP_CIPHER_CTX_free(context) }
        let count = sealed.count - Self.tagBytes
        var tag = [UInt8](UnsafeRawBufferPointer(rebasing: sealed[count...]))
        var length: Int32 = 0
        var ok =
            EVP_DecryptInit_ex(context, EVP_aes_256_gcm(), nil, nil, nil) == 1
            && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_IVLEN, Int32(Self.nonceBytes), nil) == 1
            && EVP_DecryptInit_ex(context, nil, nil, bytes, nonce) == 1
            && EVP_DecryptUpdate(context, nil, &length, aad, Int32(aad.count)) == 1
        if ok, count > 0, let output = out.baseAddress?.assumingMemoryBound(to: UInt8.self) {
            ok = EVP_DecryptUpdate(context, output, &length, input, Int32(count)) == 1
        }
        ok = ok && EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(Self.tagBytes), &tag) == 1
        var final = [UInt8](repeating: 0, count: 16)
        return ok && EVP_DecryptFinal_ex(context, &final, &length) == 1
    }

    /// The key file a publisher keeps (and `repo release` publishes): JSON with the build, channel and key.
    struct File: Codable, Sendable {
        var formatVersion = 1
        var buildId: String
        var channel: String
        var key: String
        var releaseAt: Date?
    }

    func file(build: String, channel: String, releaseAt: Date?) throws(PatchSyncError) -> Data {
        let file = File(buildId: build, channel: channel, key: Hex.encode(bytes), releaseAt: releaseAt)
        do { return try TUFCoding.encoder.encode(file) } catch { throw PatchSyncError.wrap(error) }
    }

    /// Reads a key file, refusing one for another build (by name) or not a key.
    static func read(_ data: Data, what: String, build: String) throws(PatchSyncError) -> ContentKey {
        let file: File
        do { file = try TUFCoding.decoder.decode(File.self, from: data) } catch {
            throw PatchSyncError(.refusedData, "\(what) is not a PatchSync content key file", cause: error)
        }
        guard file.formatVersion == 1 else {
            throw PatchSyncError(
                .refusedData, "\(what) has key format \(file.formatVersion); this PatchSync reads 1",
                remedy: "update PatchSync")
        }
        guard file.buildId == build else {
            throw PatchSyncError(
                .refusedData, "\(what) is the content key of build \(file.buildId), not of \(build)",
                remedy: "nothing was decrypted; the publisher must release build \(build)'s own key")
        }
        guard let bytes = Hex.decode(file.key), bytes.count == byteCount else {
            throw PatchSyncError(.refusedData, "\(what) holds no 32-byte key")
        }
        return try ContentKey(bytes: bytes)
    }
}

extension SHA256Digest {
    /// The digest's 32 bytes.
    var hexBytes: [UInt8] { Hex.decode(hex) ?? [] }
}
