import Foundation
import Testing

@testable import PatchSync

/// Signature schemes beyond Ed25519, and the delegation rules, checked against values that
/// python-tuf / securesystemslib computed (the independent implementation).
@Suite("Key types and delegation rules", .tags(.small))
struct KeyTypeAndDelegationTests {
    static let message = Array(#"{"_type":"timestamp","version":7}"#.utf8)
    static let ecdsa = TUFKey(
        keytype: "ecdsa", scheme: "ecdsa-sha2-nistp256",
        keyval: [
            "public": """
            -----BEGIN PUBLIC KEY-----
            MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAETQduI1iNJks/ertePIj1fF4YA7Pk
            cfo/vNhD8VIGv8QhCPb/cblcaGaQ3OXywVZRyqGn8wrnt8+mV/CnSw1iKA==
            -----END PUBLIC KEY-----

            """
        ])
    static let ecdsaSignature =
        "3045022032b7a8d94c1ed0b58268719446231742fba2c42a4f7fc087f417c594d9e71c1d022100e8d0ea4d986d4921a6c8e8ab6816ab0686c47a3f3b32dbb07a2daa52a0b4fcff"
    static let rsa = TUFKey(
        keytype: "rsa", scheme: "rsassa-pss-sha256",
        keyval: [
            "public": """
            -----BEGIN PUBLIC KEY-----
            MIIBojANBgkqhkiG9w0BAQEFAAOCAY8AMIIBigKCAYEAooJ4uQqg0u0Q5BMELQ4p
            E0QyQOR4SqNWj6qFamr6VxZ3rui0bBFG4ay0PEXzzFlpkGq3JiwdjALChv3xt9PE
            ZlMEZ13zi3j7xNm5LEXAJ7+fiv+3FM46ShyiVlQ4eqAl42SZkYPvdEUCDODpIh6I
            D/Bj/OmoyEHoC+r66DNGNVwyvjuQBnBnlG40Nb6LkZy7aWIQFHeZsg3DriMnHQEG
            xmD36qXZaU3t7udZgp+yZkS3DLPVQpspMHyzZBqiNm1TtQML3yTXxv/V9BR08GNl
            0GBLkHZg+AT1JLVhKeVLDMHkZR/LAYxWMLX0PF9YgebpkuQavqE/tK1O16dT/TJk
            k1n6gRhOy7e/TCKuB+Ntcn/ZugsVXk77jeSRz0sKpIfZMZopNa85PhVktTaMP+s2
            w5d30N0DbmuZHa5c4md37bYC9f0ZFKsyCIMk35O9TFKIXnMtOaaUD3w/yu+c69P2
            FftoSF2U44kmO1a0MO8dwxkf6OGv5mS7dvY9hR8n1C+ZAgMBAAE=
            -----END PUBLIC KEY-----

            """
        ])
    static let rsaSignature =
        "76a17756cd0f6afe9bee6cbbadaa05b34b39e49804a7caebe167cd6a2273052da343a322c18e37e8bb05f75b98aad443bfe60ff54300463ee72956fa78e9f84293820f134319c3c9a0f0cbf6636289f8d9d0927c0328d7df1337030ccc0a4dd3b4e4cc4a38ab70315f265c32da0a2a9105566a7a1112e7f394cac2d966d66296ecfc9d3ec0f865719143c51eab097bb159a69c2f4882be036f7ffb122c2825a98cc3a23d2a2d3e670c919a27ec5bc6e1109d48e4bbd5484724e3c0f5aebeb0b0df48a9628d64b563c0314844e1eba3b9403de93e184ddf18bb8c722ee153e658bd90885eee5467dc29b3d86b03d5a4f0e83964ec36c3d90f5e7cf36fd7eef66ed00eb6f85a0736529f633cf60108acf9cc03eb372a81d325b0cda6c6d0b8cd63c4f4610726442fa524ea792135f329bee30ddb58cfa1bb4dcf11700596b2939c1d600a48119fb6d8d28cfae86e491fac6f20286367e288d96406188d66335209630f5b87823d452685725826fe7d7e89db126aeff0ef560bc554dfe735ba8b60"

    @Test(
        "ecdsa-sha2-nistp256 and rsassa-pss-sha256 signatures made by securesystemslib verify; altered ones do not",
        arguments: [(ecdsa, ecdsaSignature), (rsa, rsaSignature)])
    func signatureSchemes(key: TUFKey, signature: String) throws {
        let sig = try #require(Hex.decode(signature))
        #expect(PublicKeySignature.verify(sig, message: Self.message, key: key))
        #expect(!PublicKeySignature.verify(sig, message: Self.message + [0x20], key: key))
        var flipped = sig
        flipped[flipped.count / 2] ^= 1
        #expect(!PublicKeySignature.verify(flipped, message: Self.message, key: key))
        var confused = key
        confused.scheme = key.scheme == "ecdsa-sha2-nistp256" ? "rsassa-pss-sha256" : "ecdsa-sha2-nistp256"
        confused.keytype = key.keytype == "ecdsa" ? "rsa" : "ecdsa"
        #expect(
            !PublicKeySignature.verify(sig, message: Self.message, key: confused), "a key used under another scheme")
    }

    @Test("Delegation path patterns match segment by segment: * never crosses a /")
    func pathPatterns() {
        let role = DelegatedRole(
            name: "x", keyids: [], threshold: 1, terminating: false,
            paths: ["maps/*", "*.txt", "dlc-?/*.pak"], pathHashPrefixes: nil)
        let cases = [
            "maps/a.map": true, "maps/x/a.map": false, "a/b.txt": false, "b.txt": true,
            "dlc-1/a.pak": true, "dlc-12/a.pak": false
        ]  // python-tuf's is_delegated_path agrees
        for (path, expected) in cases { #expect(role.isTrusted(for: path) == expected, "\(path)") }
        let hashed = DelegatedRole(
            name: "h", keyids: [], threshold: 1, terminating: false, paths: nil,
            pathHashPrefixes: [String(SHA256Hasher.hash(Data("sfx/boom.ogg".utf8)).hex.prefix(3))])
        #expect(hashed.isTrusted(for: "sfx/boom.ogg") && !hashed.isTrusted(for: "sfx/bang.ogg"))
    }

    @Test("Hash-bin (succinct) role names are those python-tuf computes")
    func succinctRoles() {
        let three = SuccinctRoles(keyids: [], threshold: 1, bitLength: 3, namePrefix: "bin")
        #expect((0..<4).map { three.role(for: "pak/\($0).pak")?.name } == ["bin-3", "bin-5", "bin-2", "bin-0"])
        let ten = SuccinctRoles(keyids: [], threshold: 1, bitLength: 10, namePrefix: "b")
        #expect((0..<2).map { ten.role(for: "pak/\($0).pak")?.name } == ["b-1d2", "b-2fc"])
    }

    @Test("Role and target names are percent-encoded as the reference client does, never leaving their folder")
    func names() throws {
        #expect(TrustClient.percentEncoded("../../escape.txt") == "..%2F..%2Fescape.txt")
        #expect(TrustClient.percentEncoded("a b/ü~x") == "a%20b%2F%C3%BC~x")
        #expect(TrustClient.fileName(role: "role.v1") == "role.v1.json")
        #expect(throws: PatchSyncError.self) { try ConformanceClient.localName("..") }
    }

    @Test("A custom field of another shape decodes as no manifest and re-encodes unchanged")
    func tolerantCustom() throws {
        let json = #"{"length":3,"hashes":{"sha256":"ab"},"custom":{"vendor":{"x":[1,2]}}}"#
        let file = try JSONDecoder().decode(TargetFile.self, from: Data(json.utf8))
        #expect(file.custom == nil)
        let again = try JSONValue.parse(try JSONEncoder().encode(file), what: "re-encoded")
        #expect(again == (try JSONValue.parse(Data(json.utf8), what: "original")))
    }
}
