import Foundation
@testable import PatchSync
import PatchSyncTestSupport
import Testing

/// Whole-file downloads (delta packs, preload ranges) are checked inside the retry policy: damaged bytes
/// are the mirror's failure, and the next mirror is asked.
@Suite("Whole-file downloads across mirrors", .tags(.medium))
struct DownloadTests {
    @Test("a whole file damaged on the first mirror is that mirror's failure: the second mirror's copy is downloaded and kept; damaged on every mirror, it is refused (65)")
    func damagedOnFirstMirror() async throws {
        let fixture = try Fixture.published()
        let damaged = try MirrorRefreshTests.mirror(of: fixture, "damaged")
        let name = try #require(try FileManager.default.subpathsOfDirectory(atPath: fixture.origin + "/objects")
            .sorted().first { name in
                var isFolder: ObjCBool = false
                return !name.hasPrefix(".") && name.split(separator: "/").count == 2
                    && FileManager.default.fileExists(atPath: fixture.origin + "/objects/" + name, isDirectory: &isFolder)
                    && !isFolder.boolValue
            })
        let path = "objects/" + name
        let good = try Data(contentsOf: URL(fileURLWithPath: fixture.origin + "/" + path))
        var bad = good
        bad[bad.count / 2] ^= 0x40
        try bad.write(to: URL(fileURLWithPath: damaged + "/" + path))
        let sha = SHA256Hasher.hash(good), length = Int64(good.count)
        let client = try HTTPClient()

        let origin = try Origin(mirrors: ["file://" + damaged, fixture.fileRemote], client: client)
        let local = fixture.directory + "/downloaded"
        _ = try await origin.download(path, to: local, length: length, sha256: sha)
        #expect(try Data(contentsOf: URL(fileURLWithPath: local)) == good)

        let alone = try Origin(mirrors: ["file://" + damaged], client: client)
        await #expect {
            try await alone.download(path, to: fixture.directory + "/alone", length: length, sha256: sha)
        } throws: { error in
            let refused = error as? PatchSyncError
            return refused?.code == .refusedData && refused?.message.contains("does not match its signed SHA-256") == true
        }
    }
}
