import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Rollback", .tags(.medium))
struct RollbackTests {
    /// Publishes a one-file build whose content names it, and brings the install to it.
    static func release(_ id: String, _ fixture: Fixture, _ install: Install) async throws {
        let dir = fixture.directory + "/tree-\(id)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try Data("build \(id)".utf8).write(to: URL(fileURLWithPath: dir + "/version.txt"))
        try fixture.publish(dir, id: id)
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
    }

    static func version(_ install: Install) throws -> String {
        try String(contentsOfFile: install.root + "/current/version.txt", encoding: .utf8)
    }

    @Test("rollback goes one step back, holds the bad build back, and a newer build moves on")
    func oneStepBack() async throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        try await Self.release("a", fixture, install)
        try await Self.release("b", fixture, install)
        let report = try install.rollback()
        #expect(report.current == "a")
        #expect(try Self.version(install) == "build a")

        let second = #expect(throws: PatchSyncError.self) { try install.rollback() }
        #expect(second?.code == .usage)
        #expect(second?.message.contains("one step back") == true)

        let held = try await Syncer(install: install).run()
        #expect(held.outcome == .heldBack, "the build rolled back from is not installed again")
        #expect(try install.status().heldBack == "b")

        try await Self.release("c", fixture, install)
        #expect(try Self.version(install) == "build c")
        #expect(try install.status().heldBack == nil)
    }

    @Test(
        "with keepBuilds 3, two rollbacks in a row are possible, and the build rolled back to keeps its manifest: verify and repair work there"
    )
    func keepMore() async throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote]) { $0.keepBuilds = 3 }
        for id in ["a", "b", "c"] { try await Self.release(id, fixture, install) }
        _ = try await Syncer(install: install).run()  // collects nothing: three are kept
        _ = try install.rollback()
        _ = try install.rollback()
        #expect(try Self.version(install) == "build a")
        // One keep rule: housekeeping kept build a's manifest as long as its folder (it deleted it at c's apply).
        #expect(FileManager.default.fileExists(atPath: install.manifestPath(try #require(install.currentDeployment()))))
        try FileManager.default.removeItem(atPath: install.root + "/current/version.txt")
        try Data("damaged".utf8).write(to: URL(fileURLWithPath: install.root + "/current/version.txt"))
        let report = try install.verify(full: true)
        #expect(report.damaged.map(\.path) == ["version.txt"])
        _ = try await Syncer(install: install).repair(report)
        _ = try install.applyPendingUpdate()
        #expect(try Self.version(install) == "build a")
        #expect(try install.verify(full: true).damaged.isEmpty)
    }

    @Test(
        "a previous build with a file deleted or truncated by hand is not made current: refused (74), the current build stays"
    )
    func damagedPreviousIsRefused() async throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        try await Self.release("a", fixture, install)
        try await Self.release("b", fixture, install)
        let previous = install.root + "/builds/a/version.txt"
        chmod(install.root + "/builds/a", 0o755)
        try FileManager.default.removeItem(atPath: previous)
        #expect {
            try install.rollback()
        } throws: { error in
            (error as? PatchSyncError)?.code == .localIO && "\(error)".contains("version.txt")
        }
        #expect(try Self.version(install) == "build b")
        try Data("build".utf8).write(to: URL(fileURLWithPath: previous))  // back, but shorter
        #expect(throws: PatchSyncError.self) { try install.rollback() }
        try Data("build a".utf8).write(to: URL(fileURLWithPath: previous))
        _ = try install.rollback()
        #expect(try Self.version(install) == "build a")
    }

    @Test("a crash between the flip and its record is reconciled from the symlink")
    func reconcileAfterCrash() async throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        try await Self.release("a", fixture, install)
        try await Self.release("b", fixture, install)
        try install.flipCurrent(to: "a")  // as if rollback died before recording
        let state = try install.state()
        try install.reconcile(state)
        let recorded = try state.read()
        #expect(recorded.current == "a")
        #expect(recorded.history == ["a"])
        #expect(recorded.heldBack == "b")
    }
}
