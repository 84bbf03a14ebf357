import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Staging stays inside the install", .tags(.medium))
struct StagingSafetyTests {
    @Test("a staged file deleted by hand mid-sync is never created again empty: its next open fails, and it stays gone")
    func deletedStagedFileIsNotRecreated() throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let state = try StateStore(path: install.databasePath)
        let identity = DeploymentIdentity(
            name: "t", buildId: "t", channel: "live", manifest: String(repeating: "a", count: 64))
        try state.update { $0.beginStaging(identity, sequence: 1) }
        let staged = StagedBuild(identity, in: install, state: state)

        // More files than the descriptor cache holds, each created by its first write.
        let files = StagedFiles(
            staged, tree: try staged.makeFolder(in: install),
            creating: Dictionary(uniqueKeysWithValues: (0..<300).map { ("f\($0)", Int64(4)) }))
        defer { files.closeAll() }
        let chunk: [UInt8] = [1, 2, 3, 4]
        func write(_ path: String) -> PatchSyncError? {
            chunk.withUnsafeBytes { raw in
                do throws(PatchSyncError) {
                    try files.write(
                        raw, chunk: SHA256Hasher.hash(raw), to: [Plan.Destination(path: path, index: 0, offset: 0)])
                    return nil
                } catch { return error }
            }
        }
        #expect(write("f0") == nil)
        try files.flush()
        try FileManager.default.removeItem(atPath: staged.directory + "/f0")  // the user deletes it
        for i in 1..<300 { #expect(write("f\(i)") == nil) }  // f0's descriptor leaves the cache
        let refused = write("f0")
        #expect(refused != nil, "a deleted staged file was created again for its next chunk")
        #expect(!FileManager.default.fileExists(atPath: staged.directory + "/f0"))
    }

    @Test("symbolic links planted in a staging tree (as folders and as files) are replaced, never followed out")
    func plantedSymlinks() async throws {
        let (fixture, install) = try await TrustTests.installedWithUpdate()
        let outside = fixture.directory + "/outside"
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        let victim = outside + "/victim.txt"
        try "keep me".write(toFile: victim, atomically: true, encoding: .utf8)

        // A half-done staging of build 2 in which something replaced a folder and a file with links out.
        let build = try fixture.sampleBuild(2, scale: 0.01)
        let files = try treeFacts(build).keys.sorted()
        let folder = try #require(files.first { $0.contains("/") }.map { ($0 as NSString).deletingLastPathComponent })
        let file = try #require(files.first { !$0.hasPrefix(folder + "/") && !folder.hasPrefix($0) })
        let staged = install.stagedDirectory("2")
        try FileManager.default.createDirectory(
            atPath: staged + "/" + (file as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            atPath: staged + "/" + (folder as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: staged + "/" + folder, withDestinationPath: outside)
        try FileManager.default.createSymbolicLink(atPath: staged + "/" + file, withDestinationPath: victim)
        let identity = try stagingIdentity(fixture, build: "2")
        try install.state().update { $0.beginStaging(identity, sequence: 0) }

        let report = try await Syncer(install: install).run()
        #expect(report.outcome == .ready)
        #expect(try FileManager.default.contentsOfDirectory(atPath: outside) == ["victim.txt"])
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "keep me")
        let attributes = try FileManager.default.attributesOfItem(atPath: install.stagedDirectory("2") + "/" + folder)
        #expect(attributes[.type] as? FileAttributeType == .typeDirectory)
        #expect(
            try treeFacts(install.stagedDirectory("2")).mapValues(\.sha256)
                == (try treeFacts(build)).mapValues(\.sha256))
    }

    @Test(
        "only the signed build goes live: a link out, a stray file and a stray folder left in a half-done staging are removed before it is ready; links in place of staging/, trash/, deltas/ and preload/ are removed, never followed"
    )
    func straysAndLinkedStateFolders() async throws {
        let (fixture, install) = try await TrustTests.installedWithUpdate()
        let outside = fixture.directory + "/player-files"
        try FileManager.default.createDirectory(atPath: outside + "/saves", withIntermediateDirectories: true)
        try "keep me".write(toFile: outside + "/saves/slot1", atomically: true, encoding: .utf8)
        let before = try treeFacts(outside)
        let build = try fixture.sampleBuild(2, scale: 0.01)
        let staged = install.stagedDirectory("2")
        try FileManager.default.createDirectory(atPath: staged + "/stray-folder", withIntermediateDirectories: true)
        try "stray".write(toFile: staged + "/stray-folder/file", atomically: true, encoding: .utf8)
        try "stray".write(toFile: staged + "/stray.txt", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: staged + "/evil", withDestinationPath: outside)
        let identity = try stagingIdentity(fixture, build: "2")
        try install.state().update { $0.beginStaging(identity, sequence: 0) }
        for name in ["trash", "deltas", "preload"] {
            try? FileManager.default.removeItem(atPath: install.root + "/.patchsync/" + name)
            try FileManager.default.createSymbolicLink(
                atPath: install.root + "/.patchsync/" + name, withDestinationPath: outside)
        }

        let report = try await Syncer(install: install).run()
        #expect(report.outcome == .ready)
        #expect(
            try treeFacts(outside) == before, "files outside the install were deleted or written through a planted link"
        )
        let names = try FileManager.default.contentsOfDirectory(atPath: staged)
        #expect(!names.contains("evil") && !names.contains("stray.txt") && !names.contains("stray-folder"))
        #expect(try treeFacts(staged).mapValues(\.sha256) == (try treeFacts(build)).mapValues(\.sha256))
        for name in ["trash", "deltas", "preload"] {
            #expect(
                (try? FileManager.default.destinationOfSymbolicLink(atPath: install.root + "/.patchsync/" + name))
                    == nil)
        }
        _ = try install.applyPendingUpdate()
        #expect(try treeFacts(outside) == before)

        // A link in place of staging/ itself: removed at the next sync, which stages in a folder of its own.
        try FileManager.default.removeItem(atPath: install.stagingDirectory)
        try FileManager.default.createSymbolicLink(atPath: install.stagingDirectory, withDestinationPath: outside)
        _ = try await Syncer(install: install).run()
        #expect(try treeFacts(outside) == before)
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: install.stagingDirectory)) == nil)
    }

    @Test(
        "a staged folder swapped for a link to the player's own files whose names match the build's: nothing there is deleted or written, and the staging is rebuilt"
    )
    func swappedFolderWithMatchingNames() async throws {
        let (fixture, install) = try await TrustTests.installedWithUpdate()
        let build = try fixture.sampleBuild(2, scale: 0.01)
        let files = try treeFacts(build).keys.sorted()
        let folder = try #require(files.first { $0.contains("/") }.map { ($0 as NSString).deletingLastPathComponent })
        // The player's own folder holds files named as the build's files in `folder`, of their sizes too.
        let outside = fixture.directory + "/player-files"
        var planted = 0
        for path in files where path.hasPrefix(folder + "/") {
            let rest = String(path.dropFirst(folder.count + 1))
            let size = try FileManager.default.attributesOfItem(atPath: build + "/" + path)[.size] as? Int ?? 0
            try FileManager.default.createDirectory(
                atPath: outside + "/" + (rest as NSString).deletingLastPathComponent,
                withIntermediateDirectories: true)
            try Data(repeating: 0x5a, count: size).write(to: URL(fileURLWithPath: outside + "/" + rest))
            planted += 1
        }
        #expect(planted > 0)
        let before = try treeFacts(outside)
        let staged = install.stagedDirectory("2")
        try FileManager.default.createDirectory(
            atPath: staged + "/" + (folder as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: staged + "/" + folder, withDestinationPath: outside)
        let identity = try stagingIdentity(fixture, build: "2")
        try install.state().update { $0.beginStaging(identity, sequence: 0) }

        let report = try await Syncer(install: install).run()
        #expect(report.outcome == .ready)
        #expect(
            try treeFacts(outside) == before, "files outside the install were deleted or written through a planted link"
        )
        let attributes = try FileManager.default.attributesOfItem(atPath: staged + "/" + folder)
        #expect(attributes[.type] as? FileAttributeType == .typeDirectory)
        #expect(try treeFacts(staged).mapValues(\.sha256) == (try treeFacts(build)).mapValues(\.sha256))
    }
}

/// The identity a sync gives the staging of `build` on the live channel (its signed manifest's SHA-256),
/// for tests that plant a half-done staging.
func stagingIdentity(_ fixture: Fixture, build: String, name: String? = nil) throws -> DeploymentIdentity {
    let folder = fixture.origin + "/targets/manifests/live"
    let file = try #require(
        try FileManager.default.contentsOfDirectory(atPath: folder).first { $0.hasSuffix(".\(build).json.gz") })
    let sha = String(file.prefix { $0 != "." })
    return DeploymentIdentity(name: name ?? build, buildId: build, channel: "live", manifest: sha)
}
