import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Verify and repair", .tags(.medium))
struct VerifyTests {
    static func installed(scale: Double = 0.01) async throws -> (Fixture, Install, String) {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: scale)
        try fixture.publish(build, id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        return (fixture, install, build)
    }

    /// Rewrites part of a read-only live file, restoring its mode (and optionally its mtime).
    static func scribble(_ path: String, keepTimes: Bool = false) throws {
        let attrs = try FileManager.default.attributesOfItem(atPath: path)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seek(toOffset: 10)
        handle.write(Data(repeating: 0x5A, count: 16))
        try handle.close()
        var restore: [FileAttributeKey: Any] = [.posixPermissions: attrs[.posixPermissions]!]
        if keepTimes { restore[.modificationDate] = attrs[.modificationDate]! }
        try FileManager.default.setAttributes(restore, ofItemAtPath: path)
    }

    @Test("each kind of damage is reported per file; an intact tree is checked without hashing")
    func reportsDamage() async throws {
        let (fixture, install, _) = try await Self.installed()
        defer { withExtendedLifetime(fixture) {} }
        let clean = try install.verify(full: false)
        #expect(clean.damaged.isEmpty && clean.filesHashed == 0 && clean.filesChecked > 300)
        let live = install.root + "/current/"
        try FileManager.default.removeItem(atPath: live + "config/default.cfg")
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: live + "audio/sfx_1.ogg")
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: live + "scripts/s0/script_1.lua"))
        try Self.scribble(live + "textures/tex_2.dds")
        let report = try install.verify(full: false)
        let problems = Dictionary(uniqueKeysWithValues: report.damaged.map { ($0.path, $0.problem) })
        #expect(
            problems == [
                "config/default.cfg": .missing, "audio/sfx_1.ogg": .wrongMode,
                "scripts/s0/script_1.lua": .wrongSize, "textures/tex_2.dds": .wrongHash
            ])
    }

    @Test("a change that keeps size and mtime escapes the fast check and is found by --full")
    func fullFindsWhatFastTrusts() async throws {
        let (fixture, install, _) = try await Self.installed()
        defer { withExtendedLifetime(fixture) {} }
        _ = try install.verify(full: false)
        try Self.scribble(install.root + "/current/levels/level_3.map", keepTimes: true)
        // The inode and mtime are unchanged, so only the full check can see it.
        let fast = try install.verify(full: false)
        let full = try install.verify(full: true)
        #expect(full.damaged.map(\.path) == ["levels/level_3.map"])
        #expect(full.filesHashed == full.filesChecked)
        #expect(fast.damaged.isEmpty || fast.damaged.map(\.path) == ["levels/level_3.map"])
    }

    @Test("repair stages a build of the damaged files from local chunks and the origin; apply makes it live")
    func repairs() async throws {
        let (fixture, install, build) = try await Self.installed()
        defer { withExtendedLifetime(fixture) {} }
        let live = install.root + "/current/"
        try Self.scribble(live + "packs/data0.pak")
        try FileManager.default.removeItem(atPath: live + "audio/sfx_3.ogg")
        let report = try install.verify(full: false)
        #expect(report.damaged.count == 2)
        let before = try treeFacts(install.root + "/current")
        let deployment = try await Syncer(install: install).repair(report)
        #expect(deployment == "1@2")
        #expect(try treeFacts(install.root + "/current") == before, "repair never touches the live tree")
        #expect(try install.status().ready == "1", "the build id, not the folder 1@2")
        _ = try install.applyPendingUpdate()
        #expect(install.currentDeployment() == "1@2" && install.currentBuild() == "1")
        try EndToEndTests.expectInstalled(install, matches: build)
        #expect(try install.verify(full: true).damaged.isEmpty)
    }
}
