import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// No record names content that is not there: a ready tree removed or changed by hand after it was
/// verified is dropped by the next command that looks at the install (found by the model test: the ready
/// record outlived its folder, and status and the launcher named a build that was gone).
@Suite("The ready record follows its tree", .tags(.medium))
struct ReadyRecordTests {
    enum Damage: String, CaseIterable, Sendable {
        case deleted, emptied, strayAdded
    }

    enum Command: String, CaseIterable, Sendable {
        case verify, rollback
    }

    @Test(
        "a ready tree deleted, emptied or added to by hand: verify and rollback drop its record; a sync stages it anew",
        arguments: Damage.allCases, Command.allCases)
    func dropped(damage: Damage, command: Command) async throws {
        let (fixture, install) = try await TrustTests.installedWithUpdate()
        defer { withExtendedLifetime(fixture) {} }
        _ = try await Syncer(install: install).run()
        let ready = try #require(try install.state().read().ready)
        let staged = install.stagedDirectory(ready.name)
        switch damage {
        case .deleted: try FileManager.default.removeItem(atPath: staged)
        case .emptied:
            for name in try FileManager.default.contentsOfDirectory(atPath: staged) {
                try FileManager.default.removeItem(atPath: staged + "/" + name)
            }
        case .strayAdded: try Data("stray".utf8).write(to: URL(fileURLWithPath: staged + "/stray.txt"))
        }
        switch command {
        case .verify: _ = try install.verify(full: false)
        case .rollback: #expect(throws: PatchSyncError.self) { try install.rollback() }  // no previous build: 64
        }
        #expect(try install.state().read().ready == nil, "the record of a tree changed by hand is dropped")
        #expect(try install.status().ready == nil)
        let report = try await Syncer(install: install).run()
        #expect(report.outcome == .ready)
        _ = try install.applyPendingUpdate()
        #expect(try install.verify(full: true).damaged.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: install.root + "/current/stray.txt"))
    }
}
