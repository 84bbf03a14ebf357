internal import CLibCrypto
import Foundation

/// Ed25519 keys, signing and verification through OpenSSL libcrypto.
public enum Ed25519 {
    /// A key pair as raw 32-byte seeds and public keys.
    public struct KeyPair: Sendable {
        public let publicKey: [UInt8]
        public let privateKey: [UInt8]
    }

    /// EVP_PKEY_keygen for a new Ed25519 key.
    public static func generate() throws(PatchSyncError) -> KeyPair {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil) else { throw failure("EVP_PKEY_CTX_new_id") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_keygen(ctx, &key) == 1, let key else {
            throw failure("EVP_PKEY_keygen")
        }
        defer { EVP_PKEY_free(key) }
        return KeyPair(
            publicKey: try raw(key, EVP_PKEY_get_raw_public_key),
            privateKey: try raw(key, EVP_PKEY_get_raw_private_key))
    }

    /// EVP_DigestSign of `message` with a raw private key.
    static func sign(_ message: [UInt8], privateKey: [UInt8]) throws(PatchSyncError) -> [UInt8] {
        guard let key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nil, privateKey, privateKey.count) else {
            throw failure("EVP_PKEY_new_raw_private_key")
        }
        defer { EVP_PKEY_free(key) }
        guard let md = EVP_MD_CTX_new() else { throw failure("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(md) }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        guard EVP_DigestSignInit(md, nil, nil, nil, key) == 1,
            EVP_DigestSign(md, &signature, &length, message, message.count) == 1
        else {
            throw failure("EVP_DigestSign")
        }
        return Array(signature[0..<length])
    }

    /// EVP_DigestVerify of `signature` over `message`; false for any mismatch or malformed key.
    static func verify(_ signature: [UInt8], message: [UInt8], publicKey: [UInt8]) -> Bool {
        guard publicKey.count == 32, signature.count == 64,
            let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, publicKey, publicKey.count)
        else {
            return false
        }
        defer { EVP_PKEY_free(key) }
        guard let md = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(md) }
        guard EVP_DigestVerifyInit(md, nil, nil, nil, key) == 1 else { return false }
        return EVP_DigestVerify(md, signature, signature.count, message, message.count) == 1
    }

    private static func raw(
        _ key: OpaquePointer,
        _ get: (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<Int>?) -> Int32
    ) throws(PatchSyncError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 32)
        var length = 32
        guard get(key, &bytes, &length) == 1 else { throw failure("EVP_PKEY_get_raw_key") }
        return Array(bytes[0..<length])
    }

    private static func failure(_ call: String) -> PatchSyncError {
        let code = ERR_get_error()
        var text = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &text, text.count)
        return PatchSyncError(
            .internal,
            "\(call) failed: \(String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
    }
}
