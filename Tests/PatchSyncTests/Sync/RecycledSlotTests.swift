import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Staging in a recycled folder", .tags(.medium))
struct RecycledSlotTests {
    /// Every regular file below `root`: its inode, and its bytes' SHA-256.
    static func inodes(_ link: String) throws -> [String: (inode: UInt64, sha256: String)] {
        // `current` is a link: the enumerator walks the folder it names.
        let root = URL(fileURLWithPath: link).resolvingSymlinksInPath().path
        var result: [String: (inode: UInt64, sha256: String)] = [:]
        guard let walker = FileManager.default.enumerator(atPath: root) else { return result }
        while let path = walker.nextObject() as? String {
            var st = stat()
            guard lstat(root + "/" + path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            result[path] = (UInt64(st.st_ino), try SHA256Digest.of(file: root + "/" + path).hex)
        }
        return result
    }

    /// An install with builds 1 and 2 applied (1 kept for rollback) and build 3 published.
    static func secondUpdate(_ fixture: Fixture, keepBuilds: Int = 2) async throws -> (Install, [String]) {
        let builds = try (1...3).map { try fixture.sampleBuild($0, scale: 0.01) }
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote]) { $0.keepBuilds = keepBuilds }
        for number in 1...2 {
            try fixture.publish(builds[number - 1], id: "\(number)")
            _ = try await Syncer(install: install).run()
            _ = try install.applyPendingUpdate()
        }
        try fixture.publish(builds[2], id: "3")
        return (install, builds)
    }

    @Test(
        "the second update is staged in the previous build's folder: the files build 3 has unchanged keep their inodes, the live build's bytes never change, rollback has nothing until the apply, and the build applied is build 3"
    )
    func secondUpdateRecyclesThePreviousBuild() async throws {
        let fixture = try Fixture()
        let (install, builds) = try await Self.secondUpdate(fixture)
        let previous = try Self.inodes(install.buildDirectory("1"))
        let live = try Self.inodes(install.root + "/current")
        let target = try treeFacts(builds[2])
        // Build 1's files held open: whether the sync keeps, replaces or removes each, its inode's bytes
        // must never change (nothing is written through in place), and no inode number is reused meanwhile.
        let held = try previous.keys.sorted().map { path in
            (path, try #require(FileHandle(forReadingAtPath: install.buildDirectory("1") + "/" + path)))
        }

        let report = try await Syncer(install: install).run()
        #expect(report.outcome == .ready)
        #expect(!FileManager.default.fileExists(atPath: install.buildDirectory("1")), "build 1's folder was taken")
        let ready = try #require(try install.state().read().ready)
        let staged = try Self.inodes(install.stagedDirectory(ready.name))
        // Untouched: every file build 1 had that build 3 has with the same bytes and mode.
        let same = previous.filter { path, file in
            target[path]?.sha256 == file.sha256 && staged[path]?.sha256 == file.sha256
        }
        #expect(same.count > 10, "the sample builds share files")
        let moved = same.filter { staged[$0.key]?.inode != $0.value.inode }.map(\.key).sorted()
        #expect(moved.isEmpty, "unchanged files of build 1 that were replaced: \(moved.prefix(5))")
        let rewritten = try held.filter { path, handle in
            try handle.seek(toOffset: 0)
            return SHA256Digest.of(try handle.readToEnd() ?? Data()).hex != previous[path]?.sha256
        }.map(\.0)
        #expect(rewritten.isEmpty, "files of build 1 written through in place: \(rewritten.prefix(5))")
        #expect(staged.count > same.count, "build 3 changes files too")
        // Not one byte of the live build changed (no file written through an inode it shares).
        let after = try Self.inodes(install.root + "/current")
        #expect(after.mapValues(\.sha256) == live.mapValues(\.sha256))
        #expect(after.mapValues(\.inode) == live.mapValues(\.inode))

        let status = try install.status()
        #expect(status.previous == nil)
        #expect(status.recycling == "1")
        let refused = #expect(throws: PatchSyncError.self) { try install.rollback() }
        #expect(refused?.code == .usage, "rollback says there is no kept build before the live one")

        _ = try install.applyPendingUpdate()
        try EndToEndTests.expectInstalled(install, matches: builds[2])
        #expect(try install.status().recycling == nil)
        // Build 3's records are the folder's: build 1's carried over, only the changed files' rewritten.
        let state = try install.state()
        let key = try state.read().recordsKey(of: ready.name)
        #expect(key == "1")
        let recorded = try state.buildFiles(build: key)
        #expect(recorded.map(\.0.path).sorted() == target.keys.sorted())
        #expect(recorded.allSatisfy { $0.0.sha256 == target[$0.0.path]?.sha256 && $0.1 != nil })
        #expect(try state.buildFiles(build: ready.name).isEmpty)
        #expect(try install.verify(full: true).damaged.isEmpty)
        #expect(try install.rollback().current == "2", "build 2 is kept for rollback again")
        try EndToEndTests.expectInstalled(install, matches: builds[1])
    }

    /// Stages and applies build 3: the build live is then exactly the published one, and verify agrees.
    static func expectPublishedAfterUpdate(_ install: Install, _ builds: [String]) async throws {
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        try EndToEndTests.expectInstalled(install, matches: builds[2])
        #expect(try install.verify(full: true).damaged.isEmpty)
    }

    @Test(
        "a live file cut short in place by hand, which the recycled folder shares (one inode), is checked and made anew, not kept: the build staged is the published one"
    )
    func liveFileDamagedInPlaceIsReplaced() async throws {
        let fixture = try Fixture()
        let (install, builds) = try await Self.secondUpdate(fixture)
        let target = try treeFacts(builds[2])
        let previous = try Self.inodes(install.buildDirectory("1"))
        let live = try Self.inodes(install.root + "/current")
        // A file in a folder that builds 1, 2 and 3 all have unchanged: one inode in builds 1 and 2.
        let shared = live.keys.filter { live[$0]?.inode == previous[$0]?.inode }.sorted()
        let path = try #require(
            shared.first { $0.contains("/") && target[$0]?.sha256 == live[$0]?.sha256 },
            "a file in a folder that builds 1, 2 and 3 share, one inode in 1 and 2")
        let full = install.root + "/current/" + path
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: full)
        #expect(truncate(full, 1) == 0)
        try await Self.expectPublishedAfterUpdate(install, builds)
    }

    @Test(
        "a file of the recycled folder whose stat no longer matches its record (size and inode the same) is not kept on the record's word: it is staged again, with a record that was checked"
    )
    func staleRecordIsNotTrusted() async throws {
        let fixture = try Fixture()
        let (install, builds) = try await Self.secondUpdate(fixture)
        let (path, full) = try Self.sharedWithTheTarget(install, builds)
        var before = stat()
        #expect(lstat(full, &before) == 0)
        let state = try install.state()
        try state.saveStatCache(
            build: "1",
            [
                path: StateStore.FileStat(
                    size: Int64(before.st_size), modifiedNanoseconds: 1, inode: Int64(before.st_ino))
            ])

        _ = try await Syncer(install: install).run()
        // Not kept on its record's word: staged again (here linked from the live build, which vouches for it).
        #expect(try state.statCache(build: "1")[path]?.modifiedNanoseconds != 1, "its record is the one checked")
        _ = try install.applyPendingUpdate()
        try EndToEndTests.expectInstalled(install, matches: builds[2])
    }

    @Test(
        "with one kept build, with three kept while only two are applied, or with a game running, an update stages in a new folder and the kept builds stay"
    )
    func noSlotWithoutABuildToRetireOrWithAGameRunning() async throws {
        let fixture = try Fixture()
        let (one, builds) = try await Self.secondUpdate(fixture, keepBuilds: 1)
        _ = try await Syncer(install: one).run()
        #expect(try one.state().read().recycling == nil)
        _ = try one.applyPendingUpdate()
        try EndToEndTests.expectInstalled(one, matches: builds[2])

        // Three kept: the next apply retires nothing, so build 1 stays a rollback target.
        let three = try Fixture()
        let (roomy, _) = try await Self.secondUpdate(three, keepBuilds: 3)
        _ = try await Syncer(install: roomy).run()
        #expect(try roomy.state().read().recycling == nil)
        #expect(FileManager.default.fileExists(atPath: roomy.buildDirectory("1")))
        #expect(try roomy.status().previous == "1")

        let other = try Fixture()
        let (install, _) = try await Self.secondUpdate(other)
        let game = try install.holdRunningLock()
        _ = try await Syncer(install: install).run()
        withExtendedLifetime(game) {}
        #expect(
            FileManager.default.fileExists(atPath: install.buildDirectory("1")), "no folder leaves builds/ under a game"
        )
        #expect(try install.state().read().recycling == nil)
        #expect(try install.status().previous == "1")
    }

    @Test(
        "a `current` flipped to the previous build without its record (a rollback killed before recording it): that folder is not taken, whatever the state says"
    )
    func unrecordedFlipKeepsTheFolder() async throws {
        let fixture = try Fixture()
        let (install, _) = try await Self.secondUpdate(fixture)
        let link = install.root + "/current"
        try FileManager.default.removeItem(atPath: link)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "builds/1")
        let state = try install.state()
        let identity = DeploymentIdentity(
            name: "3", buildId: "3", channel: "live", manifest: String(repeating: "0", count: 64))
        try state.update { $0.beginStaging(identity, sequence: 3) }
        let slot = try install.recycleSlot(for: StagedBuild(identity, in: install, state: state), buildsKept: 2)
        #expect(slot == nil)
        #expect(
            FileManager.default.fileExists(atPath: install.buildDirectory("1")), "the folder current points at stays")
        #expect(try state.read().recycling == nil)
        // With the link where the state says, the same call takes it: the refusal above was the link's.
        try FileManager.default.removeItem(atPath: link)
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "builds/2")
        #expect(try install.recycleSlot(for: StagedBuild(identity, in: install, state: state), buildsKept: 2) == "1")
    }

    @Test("a link planted in place of .patchsync/recycled is never followed by housekeeping: what it points at stays")
    func plantedRecycledLinkIsNotFollowed() async throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let victim = fixture.directory + "/victim"
        try FileManager.default.createDirectory(atPath: victim + "/someone", withIntermediateDirectories: true)
        try Data("mine".utf8).write(to: URL(fileURLWithPath: victim + "/someone/file"))
        try FileManager.default.createSymbolicLink(
            atPath: install.root + "/.patchsync/recycled", withDestinationPath: victim)
        #expect(try Housekeeping(install: install, state: try install.state()).runIfFree())
        #expect(FileManager.default.fileExists(atPath: victim + "/someone/file"), "the link's target is untouched")
    }

    /// A file in a folder that build 1 has unchanged in
    /// build 3 (and build 2 mostly too: one inode with the live build's), and its full path in build 1's folder.
    static func sharedWithTheTarget(_ install: Install, _ builds: [String]) throws -> (String, String) {
        let target = try treeFacts(builds[2])
        let previous = try inodes(install.buildDirectory("1"))
        let path = try #require(
            previous.keys.sorted().first { $0.contains("/") && target[$0]?.sha256 == previous[$0]?.sha256 },
            "a file in a folder that builds 1 and 3 share")
        return (path, install.buildDirectory("1") + "/" + path)
    }

    @Test(
        "a file of the recycled folder replaced by hand since it was verified is checked and replaced, not kept: the build staged is the published one"
    )
    func replacedSlotFileIsReplaced() async throws {
        let fixture = try Fixture()
        let (install, builds) = try await Self.secondUpdate(fixture)
        let (_, full) = try Self.sharedWithTheTarget(install, builds)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: full)[.size] as? NSNumber)
        try FileManager.default.removeItem(atPath: full)
        try Data(repeating: 0xEE, count: size.intValue).write(to: URL(fileURLWithPath: full))
        try await Self.expectPublishedAfterUpdate(install, builds)
    }

    @Test(
        "a file of the recycled folder changed in place by hand since it was verified (read-only made writable; no folder changed) is replaced, not kept: the build staged is the published one"
    )
    func changedSlotFileIsReplaced() async throws {
        let fixture = try Fixture()
        let (install, builds) = try await Self.secondUpdate(fixture)
        try overwriteInPlace(try Self.sharedWithTheTarget(install, builds).1)
        try await Self.expectPublishedAfterUpdate(install, builds)
    }
}
