import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// One mirror policy, metadata: a mirror that serves stale or refused metadata is passed over for the
/// next mirror instead of failing the refresh (``Origin/refreshTrust(directory:now:deadline:)``).
@Suite("Metadata refresh across mirrors", .tags(.medium))
struct MirrorRefreshTests {
    /// A copy of the fixture's origin as another mirror (file://), made now.
    static func mirror(of fixture: Fixture, _ name: String) throws -> String {
        let path = fixture.directory + "/" + name
        try FileManager.default.copyItem(atPath: fixture.origin, toPath: path)
        return path
    }

    static func refresh(_ install: Install, mirrors: [String]) async throws(PatchSyncError) -> TrustedMetadata {
        let origin = try Origin(mirrors: mirrors.map { "file://" + $0 }, client: try HTTPClient())
        // No deadline: the test pool may be held up by other suites for minutes, and deadlines are SlowRetrievalTests'.
        return try await origin.refreshTrust(directory: install.metadataDirectory, now: Date(), deadline: nil)
    }

    @Test("a first mirror whose timestamp has a bad signature is passed over; alone, it is refused (65)")
    func badSignature() async throws {
        let fixture = try Fixture.published()
        let tampered = try Self.mirror(of: fixture, "tampered")
        let path = tampered + "/metadata/timestamp.json"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        let sig = try #require(text.range(of: "\"sig\":\"")).upperBound
        text.replaceSubrange(sig...sig, with: text[sig] == "0" ? "1" : "0")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])

        let trusted = try await Self.refresh(install, mirrors: [tampered, fixture.origin])
        #expect(trusted.targets.signed.targets.keys.contains { $0.hasPrefix("manifests/live/") })
        let alone = await #expect(throws: PatchSyncError.self) { try await Self.refresh(install, mirrors: [tampered]) }
        #expect(
            alone?.code == .refusedData && alone?.description.contains("signature") == true,
            "\(String(describing: alone))")
    }

    @Test("a stale first mirror (a timestamp older than the trusted one) is passed over for a fresh one")
    func staleMirror() async throws {
        let fixture = try Fixture.published()
        let stale = try Self.mirror(of: fixture, "stale")
        var repository = try Repository.load(origin: fixture.origin)
        try repository.refresh(key: fixture.onlineKey)  // the origin moves on; the copy stays behind
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let fresh = try await Self.refresh(install, mirrors: [fixture.origin])

        let again = try await Self.refresh(install, mirrors: [stale, fixture.origin])
        #expect(again.timestamp.signed.version == fresh.timestamp.signed.version)
        let alone = await #expect(throws: PatchSyncError.self) { try await Self.refresh(install, mirrors: [stale]) }
        #expect(
            alone?.code == .refusedData && alone?.description.contains("rollback") == true,
            "\(String(describing: alone))")
    }
}
