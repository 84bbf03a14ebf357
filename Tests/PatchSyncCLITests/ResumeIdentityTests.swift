import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Nothing goes live that was not verified against the manifest being applied, whatever happened
/// to the staging folder between runs, and a kill at any state transition loses nothing.
@Suite("Resume records vouch only for what is on disk", .tags(.cli), .serialized)
struct ResumeIdentityTests {
    /// An install at build 1 whose sync of build 2 was killed midway (chunks recorded), following the
    /// file remote again; and the staged deployment's folder.
    static func interrupted(chunks: Int = 2) throws -> (Fixture, Install, String) {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.01), id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.03, seed: 99), id: "2")
        let nginx = try NginxOrigin(root: fixture.origin, rateLimit: "100k")
        try TwoAgentsTests.setRemotes(install, [nginx.url])
        let sync = try CLI.start(["sync", "--install", install.root, "--quiet"])
        try TwoAgentsTests.waitForStaging(install, sync.process, chunks: chunks)
        kill(sync.process.processIdentifier, SIGKILL)
        sync.process.waitUntilExit()
        try TwoAgentsTests.setRemotes(install, [fixture.fileRemote])
        let name = try #require(try install.status().staging?.buildId)
        return (fixture, install, install.root + "/.patchsync/staging/" + name)
    }

    /// Sync, apply and a full verify succeed, and the live tree is the build.
    static func expectHealedInstall(_ install: Install, _ build: String = "2") throws {
        let sync = try CLI.run(["sync", "--install", install.root])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.currentBuild() == build)
        let verify = try CLI.run(["verify", "--install", install.root, "--full"])
        #expect(verify.status == 0 && verify.stdout.contains("all intact"), "\(verify.stdout)\(verify.stderr)")
        try expectCompleteBuild(install)
    }

    /// Staged regular files that are not links into the live tree, largest first.
    static func stagedFiles(_ folder: String) throws -> [String] {
        let all = try treeFacts(folder).keys.map { folder + "/" + $0 }
        return try all.filter { path in
            let attributes = try FileManager.default.attributesOfItem(atPath: path)
            return (attributes[.referenceCount] as? Int) == 1
        }.sorted {
            let a = try FileManager.default.attributesOfItem(atPath: $0)[.size] as? Int ?? 0
            let b = try FileManager.default.attributesOfItem(atPath: $1)[.size] as? Int ?? 0
            return a > b
        }
    }

    @Test("a staging folder emptied by hand between runs: the next sync stages it anew and only verified bytes go live")
    func stagingEmptied() throws {
        let (fixture, install, folder) = try Self.interrupted()
        defer { withExtendedLifetime(fixture) {} }
        for file in try treeFacts(folder).keys { try FileManager.default.removeItem(atPath: folder + "/" + file) }
        try Self.expectHealedInstall(install)
    }

    @Test("the staging folder deleted by hand: the next sync recreates it instead of failing")
    func stagingDeleted() throws {
        let (fixture, install, _) = try Self.interrupted()
        defer { withExtendedLifetime(fixture) {} }
        try FileManager.default.removeItem(atPath: install.root + "/.patchsync/staging")
        try Self.expectHealedInstall(install)
    }

    @Test(
        "staged files truncated, replaced or overwritten in place between runs: their records are dropped and their chunks fetched again"
    )
    func stagedFilesChanged() throws {
        let (fixture, install, folder) = try Self.interrupted()
        defer { withExtendedLifetime(fixture) {} }
        let files = try Self.stagedFiles(folder)
        try #require(files.count >= 3)
        let truncated = try FileHandle(forWritingTo: URL(fileURLWithPath: files[0]))
        try truncated.truncate(atOffset: 100)
        try truncated.close()
        let size = try FileManager.default.attributesOfItem(atPath: files[1])[.size] as? Int ?? 0
        try Data(repeating: 7, count: size).write(to: URL(fileURLWithPath: files[1]), options: .atomic)  // a new inode
        let inPlace = try FileHandle(forWritingTo: URL(fileURLWithPath: files[2]))
        let length = try FileManager.default.attributesOfItem(atPath: files[2])[.size] as? Int ?? 0
        try inPlace.write(contentsOf: Data(repeating: 0, count: length))  // same inode, same size
        try inPlace.close()
        try Self.expectHealedInstall(install)
    }

    @Test(
        "a resumed sync reads again only the staged files written to since their last flush: untouched ones are vouched for by their stamp"
    )
    func resumeRereadsOnlyChangedFiles() throws {
        let (fixture, install, folder) = try Self.interrupted(chunks: 30)
        defer { withExtendedLifetime(fixture) {} }
        let recorded = try #require(
            try stateQuery(install, "SELECT DISTINCT path FROM staged_chunk ORDER BY path").first)
        let inPlace = try FileHandle(forWritingTo: URL(fileURLWithPath: folder + "/" + recorded))
        try inPlace.write(contentsOf: Data(repeating: 0, count: 16))  // same inode and size, a new change time
        try inPlace.close()
        let sync = try CLI.run(["sync", "--install", install.root, "--quiet"], environment: ["PATCHSYNC_LOG": "info"])
        #expect(sync.status == 0, "\(sync.stderr)")
        let line = try #require(
            sync.stderr.split(separator: "\n").first { $0.contains("unchanged since their last flush") },
            "\(sync.stderr)")
        print("resumed sync: \(line)")
        let numbers = line.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }.suffix(3)
        let (vouched, reread) = (numbers.first ?? 0, numbers.dropFirst().first ?? -1)
        // Read again: the overwritten file, and those the kill cut short (at most one per connection, 6).
        #expect(vouched >= 1 && reread >= 1 && reread <= 7, "\(line)")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        let verify = try CLI.run(["verify", "--install", install.root, "--full"])
        #expect(verify.status == 0 && verify.stdout.contains("all intact"), "\(verify.stdout)\(verify.stderr)")
    }

    @Test(
        "a staged file overwritten in place with its modification time put back: its change time gives it away, it is read again, and no unverified byte goes live"
    )
    func overwriteWithModificationTimePutBack() throws {
        let (fixture, install, folder) = try Self.interrupted(chunks: 30)
        defer { withExtendedLifetime(fixture) {} }
        // A file whose first chunk is recorded done: zeros over its first bytes would go live if trusted.
        let recorded = try #require(
            try stateQuery(install, "SELECT path FROM staged_chunk WHERE chunk = 0 ORDER BY path").first)
        let path = folder + "/" + recorded
        var before = stat()
        try #require(lstat(path, &before) == 0)
        let inPlace = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try inPlace.write(contentsOf: Data(repeating: 0, count: 16))  // same inode and size
        try inPlace.close()
        var times = [before.st_atim, before.st_mtim]
        try #require(utimensat(AT_FDCWD, path, &times, 0) == 0)  // the modification time put back, to the nanosecond
        var after = stat()
        try #require(lstat(path, &after) == 0)
        #expect(after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec)
        try Self.expectHealedInstall(install)
    }

    @Test("verify --repair --now three times with no sync between: every repair goes live intact")
    func repairLoop() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.01), id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        var deployments: [String] = []
        for round in 1...3 {
            let victim = try #require(try treeFacts(install.root + "/current").keys.sorted().dropFirst(round).first)
            let path = install.root + "/current/" + victim
            chmod(path, 0o644)
            try Data(repeating: UInt8(round), count: 64).write(to: URL(fileURLWithPath: path))
            let repair = try CLI.run(["verify", "--install", install.root, "--repair", "--now"])
            #expect(repair.status == 0, "round \(round): \(repair.stdout)\(repair.stderr)")
            let verify = try CLI.run(["verify", "--install", install.root, "--full"])
            #expect(verify.status == 0 && verify.stdout.contains("all intact"), "round \(round): \(verify.stdout)")
            try expectCompleteBuild(install)
            deployments.append(try #require(install.currentDeployment()))
        }
        #expect(Set(deployments).count == 3, "each repair is a deployment of its own: \(deployments)")
    }

    @Test("the same build id on another channel: its staging is never resumed for this channel's build")
    func sameBuildIdOtherChannel() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.01), id: "1")
        let live2 = try fixture.sampleBuild(2, scale: 0.01)
        try fixture.publish(live2, id: "2")
        let betaTree = fixture.directory + "/beta-2"
        try FileManager.default.copyItem(atPath: live2, toPath: betaTree)
        try evolve(betaTree, release: 77)
        try fixture.publish(betaTree, id: "2", channel: "beta")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote]) { $0.channel = "beta" }
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        let data = try Data(contentsOf: URL(fileURLWithPath: install.configPath))
        var config = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        config["channel"] = "live"
        try JSONSerialization.data(withJSONObject: config).write(to: URL(fileURLWithPath: install.configPath))
        let sync = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(sync.status == 0 && sync.stdout.contains("\"outcome\":\"ready\""), "\(sync.stdout)\(sync.stderr)")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(
            try treeFacts(install.root + "/current").mapValues(\.sha256) == (try treeFacts(live2)).mapValues(\.sha256))
        try expectCompleteBuild(install)
    }
}

/// A kill aimed at every state transition (`PATCHSYNC_CRASH_AT`): the live tree stays one complete
/// build, state.db stays intact, and the next sync and apply finish the job.
@Suite("Kills at every state transition", .tags(.cli), .serialized)
struct TransitionKillTests {
    /// (point, command that reaches it, whether build 2 is staged and ready first)
    static let points: [(String, String, Bool)] = [
        ("stagingBegun", "sync", false), ("stagingFinished", "sync", false),
        ("applyMoved", "apply", true), ("applyFlipped", "apply", true), ("applyRecorded", "apply", true),
        ("retired", "apply", true), ("rollbackFlipped", "rollback", false)
    ]

    @Test(
        "SIGKILL at each named transition: current is complete, state.db intact, sync and apply complete afterwards",
        arguments: 0..<7)
    func killAt(_ index: Int) throws {
        let (point, command, stageFirst) = Self.points[index]
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        for id in ["0", "1"] {  // two builds applied: something to retire and to roll back to
            try fixture.publish(try fixture.sampleBuild(Int(id)! + 1, scale: 0.005), id: id)
            #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
            #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        }
        try fixture.publish(try fixture.sampleBuild(3, scale: 0.005), id: "2")
        if stageFirst {
            // Staged while the game runs, so in a new folder: the apply then has build 0's folder to retire
            // (otherwise the staging starts in it and nothing is left to retire).
            let game = point == "retired" ? try install.holdRunningLock() : nil
            #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
            withExtendedLifetime(game) {}
        }
        let killed = try CLI.run([command, "--install", install.root], environment: ["PATCHSYNC_CRASH_AT": point])
        #expect(
            killed.status == SIGKILL,
            "\(point): the command should die there (status \(killed.status)): \(killed.stderr)")
        try expectCompleteBuild(install)
        #expect(try integrityCheck(install) == "ok")
        if point == "stagingFinished" {
            let again = try CLI.run(["sync", "--install", install.root, "--json"])
            #expect(
                again.stdout.contains("\"outcome\":\"alreadyReady\""), "the finished staging is kept: \(again.stdout)")
        }
        if command == "rollback" {
            #expect(try CLI.run(["apply", "--install", install.root]).status == 0)  // reconciles; nothing is ready
            #expect(install.currentBuild() == "0")
            #expect(try install.status().heldBack == "1", "the rollback is recorded from the symlink")
            return
        }
        let sync = try CLI.run(["sync", "--install", install.root])
        #expect(sync.status == 0, "\(point): \(sync.stderr)")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.currentBuild() == "2", "\(point)")
        try expectCompleteBuild(install)
        let verify = try CLI.run(["verify", "--install", install.root, "--full"])
        #expect(verify.status == 0, "\(point): \(verify.stdout)")
    }
}
