import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// Whole-file downloads (delta packs, preload ranges) are checked inside the retry policy: damaged bytes
/// are the mirror's failure, and the next mirror is asked.
@Suite("Whole-file downloads across mirrors", .tags(.medium))
struct DownloadTests {
    @Test(
        "a whole file damaged on the first mirror is that mirror's failure: the second mirror's copy is downloaded and kept; a damaged start from an earlier run starts over instead of blaming the mirror that finished it; a link at the file's name is replaced, never written through; damaged on every mirror, it is refused (65)"
    )
    func damagedOnFirstMirror() async throws {
        let fixture = try Fixture.published()
        let damaged = try MirrorRefreshTests.mirror(of: fixture, "damaged")
        let name = try #require(
            try FileManager.default.subpathsOfDirectory(atPath: fixture.origin + "/objects")
                .sorted().first { name in
                    var isFolder: ObjCBool = false
                    return !name.hasPrefix(".") && name.split(separator: "/").count == 2
                        && FileManager.default.fileExists(
                            atPath: fixture.origin + "/objects/" + name, isDirectory: &isFolder)
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

        // A damaged start left by an earlier run, then a good mirror finishing it: the pieced-together copy
        // starts over on that mirror instead of blaming it (with one mirror, every sync failed with 65).
        let resumed = fixture.directory + "/resumed"
        try Data(bad.prefix(bad.count / 2 + 1)).write(to: URL(fileURLWithPath: resumed))
        let single = try Origin(mirrors: [fixture.fileRemote], client: client)
        _ = try await single.download(path, to: resumed, length: length, sha256: sha)
        #expect(try Data(contentsOf: URL(fileURLWithPath: resumed)) == good)

        // A link planted at the download's name is removed, never written through.
        let outside = fixture.directory + "/outside.txt"
        try Data("the player's file".utf8).write(to: URL(fileURLWithPath: outside))
        let planted = fixture.directory + "/planted"
        try FileManager.default.createSymbolicLink(atPath: planted, withDestinationPath: outside)
        _ = try await single.download(path, to: planted, length: length, sha256: sha)
        #expect(try String(contentsOfFile: outside, encoding: .utf8) == "the player's file")
        #expect(try Data(contentsOf: URL(fileURLWithPath: planted)) == good)
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: planted)) == nil)

        let alone = try Origin(mirrors: ["file://" + damaged], client: client)
        await #expect {
            try await alone.download(path, to: fixture.directory + "/alone", length: length, sha256: sha)
        } throws: { error in
            let refused = error as? PatchSyncError
            return refused?.code == .refusedData
                && refused?.message.contains("does not match its signed SHA-256") == true
        }
    }
}
