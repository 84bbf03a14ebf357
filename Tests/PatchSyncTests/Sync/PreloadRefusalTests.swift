import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// Build 1 installed from the origin folder; build 2 (or any folder) published as a preload.
private struct PreloadWorld {
    let fixture: Fixture
    let install: Install
    let build2: String
    var contentKeys: String { fixture.keyDirectory + "/content" }

    init(scale: Double = 0.01) async throws {
        fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: scale), id: "1", bundles: SampleGame.bundles)
        build2 = try fixture.sampleBuild(2, scale: scale)
        install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        #expect(try install.applyPendingUpdate().applied)
    }

    @discardableResult
    func publishPreload(_ build: String, id: String, releaseAt: Date = Date(timeIntervalSinceNow: 86400)) throws
        -> Publisher.Report
    {
        var options = Publisher.Options(
            buildDirectory: build, origin: fixture.origin, buildId: try BuildID(id),
            bundles: try BundleRules(bundles: SampleGame.bundles))
        options.preload = Publisher.Preload(releaseAt: releaseAt, contentKeys: contentKeys)
        return try Publisher(options: options, signers: fixture.signers).run()
    }

    func sync() async throws -> SyncReport { try await Syncer(install: install).run() }

    /// Signs `keyFile` as build `build`'s released key, as a holder of the online key could, unchecked.
    func signRelease(_ keyFile: Data, build: String) throws {
        var repo = try Repository.load(origin: fixture.origin)
        try repo.addRelease(
            keyFile, target: OriginLayout.keyTarget(channel: "live", build: build), online: fixture.onlineKey,
            lifetimes: .init(), now: Date())
        try repo.resign(key: fixture.onlineKey, lifetimes: .init(), now: Date())
    }

    func release(_ build: String) throws {
        var repo = try Repository.load(origin: fixture.origin)
        try repo.release(build: build, channel: "live", contentKeys: contentKeys, online: fixture.onlineKey)
    }

    /// The install is still on build 1, with nothing ready.
    func expectUntouched() throws {
        #expect(install.currentDeployment()?.hasPrefix("1") == true)
        #expect(try install.status().ready == nil)
        #expect(
            try treeFacts(install.root + "/current")
                == (try treeFacts(fixture.directory + "/build-1")).mapValues {
                    FileFacts(sha256: $0.sha256, mode: $0.mode & 0o555)
                })
    }

    /// The preloaded ranges of sealed objects (not the manifest), largest first.
    func sealedRanges() throws -> [String] {
        let target = try #require(try Repository.load(origin: fixture.origin).targetFiles["manifests/live/2.json.gz"])
        let plan = try Repository.plan(in: fixture.origin, "manifests/live/2.json.gz", target)
        let sealed = Set(plan.objects.map(\.sealed.hex))
        let folder = install.preloadDirectory
        return try FileManager.default.contentsOfDirectory(atPath: folder)
            .filter { sealed.contains(String($0.prefix(64))) && !$0.hasSuffix(".part") }
            .sorted {
                try FileSystem.status(folder + "/" + $0)!.st_size > FileSystem.status(folder + "/" + $1)!.st_size
            }
            .map { folder + "/" + $0 }
    }
}

private func flipByte(_ path: String, at offset: Int) throws {
    let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    try handle.seek(toOffset: UInt64(offset))
    let byte = try #require(try handle.read(upToCount: 1)).first ?? 0
    try handle.seek(toOffset: UInt64(offset))
    try handle.write(contentsOf: [byte ^ 0x5a])
}

@Suite("Preload refusals: a hostile origin, a wrong key, tampered ciphertext", .tags(.medium), .serialized)
struct PreloadRefusalTests {
    @Test(
        "a released key that is not the one the build was sealed with, or one for another build, is refused (65) before anything is decrypted; the live tree is untouched; the right key then unlocks it"
    )
    func hostileKeys() async throws {
        let world = try await PreloadWorld()
        try world.publishPreload(world.build2, id: "2")
        #expect(try await world.sync().outcome == .preloaded)
        let wrong = try ContentKey.generate().file(build: "2", channel: "live", releaseAt: nil)
        try world.signRelease(wrong, build: "2")
        await #expect { try await world.sync() } throws: { error in
            let e = error as? PatchSyncError
            return e?.code == .refusedData && e?.message.contains("not the key its content was sealed with") == true
        }
        try world.expectUntouched()
        let other = try ContentKey.generate().file(build: "3", channel: "live", releaseAt: nil)
        try world.signRelease(other, build: "2")
        await #expect { try await world.sync() } throws: { error in
            (error as? PatchSyncError)?.message.contains("is the content key of build 3, not of 2") == true
        }
        try world.expectUntouched()
        #expect(throws: PatchSyncError.self, "the publisher side refuses a wrong key as well") {
            var repo = try Repository.load(origin: world.fixture.origin)
            try repo.release(keyFile: wrong, channel: "live", build: "2", online: world.fixture.onlineKey)
        }
        try world.release("2")
        #expect(try await world.sync().outcome == .ready)
        #expect(try world.install.applyPendingUpdate().applied)
        #expect(try treeFacts(world.install.root + "/current").count == (try treeFacts(world.build2)).count)

        // Years later, a file of the build damaged by hand: repair fetches its sealed object again and opens
        // it with the released key.
        let old = try treeFacts(world.fixture.directory + "/build-1"), new = try treeFacts(world.build2)
        let changed = try #require(new.keys.sorted().first { old[$0]?.sha256 != new[$0]?.sha256 })
        try FileManager.default.removeItem(atPath: world.install.root + "/current/" + changed)
        let report = try world.install.verify(full: false)
        #expect(report.damaged.map(\.path) == [changed])
        _ = try await Syncer(install: world.install).repair(report)
        #expect(try world.install.applyPendingUpdate().applied)
        try EndToEndTests.expectInstalled(world.install, matches: world.build2)
    }

    @Test(
        "tampered ciphertext or tag: in the origin, the preload refuses the range (its signed hash); in the preload, unlocking refuses the unit (GCM), drops it and the next sync fetches it again; the live tree is untouched throughout"
    )
    func tampered() async throws {
        let world = try await PreloadWorld()
        try world.publishPreload(world.build2, id: "2")
        let target = try #require(
            try Repository.load(origin: world.fixture.origin).targetFiles["manifests/live/2.json.gz"])
        let plan = try Repository.plan(in: world.fixture.origin, "manifests/live/2.json.gz", target)
        let sealed = Set(plan.objects.map(\.sealed))
        let range = try #require(
            plan.routes.first { $0.from == "1" }?.bundles.values.joined().first { sealed.contains($0.object) })
        let inOrigin = world.fixture.origin + "/" + OriginLayout.object(range.object)
        let at = Int(range.offset + range.length / 2)
        try flipByte(inOrigin, at: at)
        await #expect { try await world.sync() } throws: { ($0 as? PatchSyncError)?.code == .refusedData }
        try world.expectUntouched()
        try flipByte(inOrigin, at: at)
        #expect(try await world.sync().outcome == .preloaded)

        let ranges = try world.sealedRanges()
        let damaged = try #require(ranges.first)
        let size = Int(try #require(try FileSystem.status(damaged)).st_size)
        try flipByte(damaged, at: size / 2)  // ciphertext
        if ranges.count > 1 {
            let other = ranges[1]
            try flipByte(other, at: Int(try #require(try FileSystem.status(other)).st_size) - 1)  // the last unit's tag
        }
        try world.release("2")
        await #expect { try await world.sync() } throws: { error in
            let e = error as? PatchSyncError
            return e?.code == .refusedData && e?.message.contains("fails authentication") == true
        }
        try world.expectUntouched()
        var outcome = SyncReport.Outcome.preloaded
        for _ in 0..<3 where outcome != .ready {  // each damaged range is dropped as it is met, then fetched again
            do { outcome = try await world.sync().outcome } catch let error as PatchSyncError
                where error.code == .refusedData
            {
                try world.expectUntouched()
            }
        }
        #expect(outcome == .ready)
        #expect(try world.install.applyPendingUpdate().applied)
        let installed = try treeFacts(world.install.root + "/current")
        #expect(
            installed == (try treeFacts(world.build2)).mapValues { FileFacts(sha256: $0.sha256, mode: $0.mode & 0o555) }
        )
    }

    @Test(
        "a newer preload replaces an older one: the sealed content they share is not fetched again; releasing the newer needs the older's key released too"
    )
    func newerPreloadShares() async throws {
        let world = try await PreloadWorld(scale: 0.02)
        try world.publishPreload(world.build2, id: "2-rc1")
        let first = try await world.sync()
        #expect(first.outcome == .preloaded)
        let rc2 = world.fixture.directory + "/build-2-rc2"
        #expect(try CLI.runProgram("/bin/cp", ["-a", world.build2, rc2]).status == 0)
        try Data("a hotfix\n".utf8).write(to: URL(fileURLWithPath: rc2 + "/hotfix.txt"))
        let report = try world.publishPreload(rc2, id: "2-rc2")
        #expect(
            (report.preload?.sealedBytes ?? 0) < (first.preload?.bytes ?? 0) / 2,
            "rc2 seals little: it shares rc1's objects")
        let held = Set(try FileManager.default.contentsOfDirectory(atPath: world.install.preloadDirectory))
        let second = try await world.sync()
        #expect(second.outcome == .preloaded && second.preload?.buildId == "2-rc2")
        let status = try #require(second.preload)
        let now = Set(try FileManager.default.contentsOfDirectory(atPath: world.install.preloadDirectory))
        let kept = now.intersection(held).compactMap { Int64($0.split(separator: ".").last ?? "") }.reduce(0, +)
        #expect(kept > 0, "rc1's ranges that rc2 shares stay")
        #expect(
            second.bytesReceived <= status.bytes - kept + (64 << 10),
            "fetched \(second.bytesReceived) of \(status.bytes), \(kept) already here")
        #expect(throws: PatchSyncError.self, "rc2 shares rc1's sealed objects: rc1's key goes first") {
            try world.release("2-rc2")
        }
        try world.release("2-rc1")
        try world.release("2-rc2")
        #expect(try await world.sync().outcome == .ready)
        #expect(try world.install.applyPendingUpdate().applied)
        #expect(
            try treeFacts(world.install.root + "/current")
                == (try treeFacts(rc2)).mapValues { FileFacts(sha256: $0.sha256, mode: $0.mode & 0o555) })
    }

    @Test(
        "a preload never hides the live build: a fresh install gets build 1 and the preload beside it; a build published at once while it is pending goes live with the preload listed again above it; a refresh whose due release fails still re-signs; a preload is neither promoted nor rolled back to"
    )
    func liveBesidePreload() async throws {
        let world = try await PreloadWorld()
        try world.publishPreload(world.build2, id: "2", releaseAt: Date(timeIntervalSinceNow: 3600))
        let fresh = try world.fixture.makeInstall("fresh", remotes: [world.fixture.fileRemote])
        let first = try await Syncer(install: fresh).run()
        #expect(first.outcome == .ready && first.buildId == "1" && first.preload?.buildId == "2", "\(first)")
        #expect(try fresh.applyPendingUpdate().applied && fresh.currentDeployment()?.hasPrefix("1") == true)
        #expect(try await Syncer(install: fresh).run().outcome == .preloaded)

        // A build published at once goes live; the preload is listed again above it, never stranded.
        try world.fixture.publish(world.fixture.directory + "/build-1", id: "1.1", bundles: SampleGame.bundles)
        let listing = ChannelListing(try Repository.load(origin: world.fixture.origin), channel: "live")
        #expect(
            listing.current?.info.buildId == "1.1" && listing.pendingPreloads.map(\.info.buildId) == ["2"],
            "\(listing.builds.map(\.info))")
        #expect(throws: PatchSyncError.self) {
            try Release(origin: world.fixture.origin, signers: world.fixture.signers)
                .promote(try BuildID("2"), from: .live, to: try Channel("beta"))
        }

        // Due, with a key file that is not the build's: reported, and snapshot and timestamp re-signed all the same.
        try ContentKey.generate().file(build: "2", channel: "live", releaseAt: nil)
            .write(to: URL(fileURLWithPath: world.contentKeys + "/live/2.key"))
        var repo = try Repository.load(origin: world.fixture.origin)
        let before = repo.snapshotVersion
        let outcome = try repo.refresh(
            key: world.fixture.onlineKey, now: Date(timeIntervalSinceNow: 7200),
            contentKeys: world.contentKeys)
        #expect(outcome.released.isEmpty && outcome.failed.count == 1, "\(outcome)")
        #expect(try Repository.load(origin: world.fixture.origin).snapshotVersion == before + 1)
    }

    @Test(
        "a new online key takes over the releases role with a targets signature (refused without one, nothing written); it then releases, and players unlock; 460 days on, the refresh job has kept the releases role valid"
    )
    func onlineKeyRotation() async throws {
        let world = try await PreloadWorld()
        try world.publishPreload(world.build2, id: "2")
        #expect(try await world.sync().outcome == .preloaded)
        let newOnline = SigningKey(try Ed25519.generate())
        var repo = try Repository.load(origin: world.fixture.origin)
        let rootVersion = repo.rootVersion
        #expect(throws: PatchSyncError.self) {
            try repo.rotateRoot(
                .init(online: newOnline.publicKey), signers: .init(root: [world.fixture.rootKey], online: newOnline))
        }
        #expect(try Repository.load(origin: world.fixture.origin).rootVersion == rootVersion)
        try repo.rotateRoot(
            .init(online: newOnline.publicKey),
            signers: .init(root: [world.fixture.rootKey], targets: [world.fixture.targetsKey], online: newOnline))
        var rotated = try Repository.load(origin: world.fixture.origin)
        try rotated.release(build: "2", channel: "live", contentKeys: world.contentKeys, online: newOnline)
        #expect(try await world.sync().outcome == .ready)
        #expect(try world.install.applyPendingUpdate().applied)

        // A year and more on: the yearly renewal of targets and the refresh job keep the releases role
        // valid too (it expires with targets' lifetime, 455 days), so players still find the key it lists.
        let later = Date(timeIntervalSinceNow: 400 * 86400), after = Date(timeIntervalSinceNow: 460 * 86400)
        var year = try Repository.load(origin: world.fixture.origin)
        let releasesVersion = try #require(year.releases?.signed.version)
        try year.renewTargets(signers: .init(targets: [world.fixture.targetsKey], online: newOnline), now: later)
        try year.refresh(key: newOnline, now: later)
        #expect(year.releases?.signed.version == releasesVersion + 1)
        try year.refresh(key: newOnline, now: Date(timeIntervalSinceNow: 458 * 86400))  // the daily job, later on
        #expect(try await Syncer(install: world.install, now: after).run().outcome == .upToDate)
    }

    @Test("a unit opens only with its key, in its place, of its object and build (AES-256-GCM associated data)")
    func sealedUnits() throws {
        let key = try ContentKey.generate()
        let sealer = Sealer(key: key, build: "2")
        let plain = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        let label = SHA256Digest.of(Data("object".utf8))
        let (sealed, object) = try sealer.seal(plain, object: label)
        #expect(object.units.count == 3 && sealed.count == plain.count + 3 * 16)
        #expect(sealer.open(sealed, object: object) == plain)
        #expect(Sealer(key: try ContentKey.generate(), build: "2").open(sealed, object: object) == nil, "another key")
        #expect(Sealer(key: key, build: "3").open(sealed, object: object) == nil, "another build")
        var other = object
        other.object = SHA256Digest.of(Data("other".utf8))
        #expect(sealer.open(sealed, object: other) == nil, "another object")
        var swapped = sealed
        let unit = 1 << 20 + 16
        swapped.replaceSubrange(0..<unit, with: sealed[unit..<(2 * unit)])
        swapped.replaceSubrange(unit..<(2 * unit), with: sealed[0..<unit])
        #expect(sealer.open(swapped, object: object) == nil, "units swapped")
        var cut = object
        cut.units = Array(object.units.prefix(2))
        cut.length = Int64(2 * unit)
        #expect(sealer.open(sealed.prefix(2 * unit), object: cut) == nil, "cut short")
        #expect(key.commitment(build: "2") != key.commitment(build: "3"))
    }
}
