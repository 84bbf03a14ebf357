import Foundation
import Testing

@testable import PatchSync

@Suite("Canonical JSON and signatures", .tags(.small))
struct CanonicalJSONTests {
    @Test("canonical form sorts keys, drops whitespace and escapes only quote and backslash")
    func canonicalForm() throws {
        let value = try JSONValue.parse(
            Data(#"{ "b": [1, true, null], "a": "x\"y\\z\n", "é": {} }"#.utf8), what: "test")
        let text = String(decoding: try value.canonical(), as: UTF8.self)
        #expect(text == "{\"a\":\"x\\\"y\\\\z\n\",\"b\":[1,true,null],\"é\":{}}")
    }

    @Test("canonical JSON refuses non-integer numbers")
    func refusesFloats() throws {
        let value = try JSONValue.parse(Data(#"{"a": 1.5}"#.utf8), what: "test")
        #expect(throws: PatchSyncError.self) { try value.canonical() }
    }

    @Test("an Ed25519 key id is the SHA-256 of the key's canonical JSON")
    func keyID() throws {
        let key = TUFKey(keytype: "ed25519", scheme: "ed25519", keyval: ["public": String(repeating: "ab", count: 32)])
        let canonical =
            #"{"keytype":"ed25519","keyval":{"public":"\#(String(repeating: "ab", count: 32))"},"scheme":"ed25519"}"#
        #expect(try key.keyID() == SHA256Digest.of(Data(canonical.utf8)).hex)
    }

    @Test("signatures verify against the threshold, and a changed field breaks them")
    func signAndVerify() throws {
        let key = SigningKey(try Ed25519.generate())
        let other = SigningKey(try Ed25519.generate())
        let meta = TimestampMetadata(
            version: 3, expires: Date(timeIntervalSince1970: 2_000_000_000),
            meta: ["snapshot.json": MetaFile(version: 2)])
        let signed = try Signed(signing: meta, with: [key])
        let role = TUFRole(keyids: [try key.publicKey.keyID()], threshold: 1)
        let keys = [try key.publicKey.keyID(): key.publicKey]
        let reparsed: Signed<TimestampMetadata> = try Signed(parsing: try signed.serialized(), name: "timestamp.json")
        try reparsed.verify(role: role, keys: keys, name: "timestamp.json")
        #expect(reparsed.signed.version == 3)

        let forged = try signed.serialized().replacingOccurrences("\"version\":3", "\"version\":4")
        let tampered: Signed<TimestampMetadata> = try Signed(parsing: forged, name: "timestamp.json")
        #expect(throws: PatchSyncError.self) { try tampered.verify(role: role, keys: keys, name: "timestamp.json") }

        let wrongKey = try Signed(signing: meta, with: [other])
        #expect(throws: PatchSyncError.self) { try wrongKey.verify(role: role, keys: keys, name: "timestamp.json") }
        let twoNeeded = TUFRole(keyids: role.keyids, threshold: 2)
        #expect(throws: PatchSyncError.self) { try signed.verify(role: twoNeeded, keys: keys, name: "timestamp.json") }
    }
}

extension Data {
    func replacingOccurrences(_ a: String, _ b: String) -> Data {
        Data(String(decoding: self, as: UTF8.self).replacingOccurrences(of: a, with: b).utf8)
    }
}
