internal import CLibCrypto
import Foundation

/// Verification of TUF signatures for the key types and schemes the specification names:
/// `ed25519`, `ecdsa-sha2-nistp256` (PEM public key, DER signature) and `rsassa-pss-sha256`
/// (PEM public key, MGF1-SHA256, any salt length), all through libcrypto's EVP interface.
enum PublicKeySignature {
    /// The smallest RSA modulus accepted, in bits.
    static let minimumRSABits: Int32 = 2048

    /// True when `signature` is a valid signature of `message` by `key`; false for every
    /// mismatch, unsupported type or malformed key.
    static func verify(_ signature: [UInt8], message: [UInt8], key: TUFKey) -> Bool {
        guard let pub = key.keyval["public"] else { return false }
        switch (key.keytype, key.scheme) {
        case ("ed25519", "ed25519"):
            guard let raw = Hex.decode(pub) else { return false }
            return Ed25519.verify(signature, message: message, publicKey: raw)
        case ("ecdsa", "ecdsa-sha2-nistp256"), ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256"):
            return withPEM(pub) { pkey in
                guard EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC, curveName(pkey) == "prime256v1" else { return false }
                return digestVerify(pkey, signature, message, pss: false)
            }
        case ("rsa", "rsassa-pss-sha256"):
            return withPEM(pub) { pkey in
                guard EVP_PKEY_get_base_id(pkey) == EVP_PKEY_RSA, EVP_PKEY_get_bits(pkey) >= minimumRSABits else {
                    return false
                }
                return digestVerify(pkey, signature, message, pss: true)
            }
        default:
            return false
        }
    }

    private static func withPEM(_ pem: String, _ body: (OpaquePointer) -> Bool) -> Bool {
        let bytes = Array(pem.utf8)
        guard bytes.count < 16_384 else { return false }
        return bytes.withUnsafeBytes { buffer -> Bool in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count)) else { return false }
            defer { BIO_free(bio) }
            guard let pkey = PEM_read_bio_PUBKEY(bio, nil, nil, nil) else {
                ERR_clear_error()
                return false
            }
            defer { EVP_PKEY_free(pkey) }
            return body(pkey)
        }
    }

    private static func curveName(_ pkey: OpaquePointer) -> String? {
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_group_name(pkey, &name, name.count, &length) == 1 else { return nil }
        return String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func digestVerify(_ pkey: OpaquePointer, _ signature: [UInt8], _ message: [UInt8], pss: Bool) -> Bool
    {
        guard let md = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(md) }
        var pctx: OpaquePointer?
        guard EVP_DigestVerifyInit(md, &pctx, EVP_sha256(), nil, pkey) == 1 else {
            ERR_clear_error()
            return false
        }
        if pss {
            guard EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) == 1,
                EVP_PKEY_CTX_set_rsa_mgf1_md(pctx, EVP_sha256()) == 1,
                EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_AUTO) == 1
            else {
                ERR_clear_error()
                return false
            }
        }
        let ok = EVP_DigestVerify(md, signature, signature.count, message, message.count) == 1
        ERR_clear_error()
        return ok
    }
}
