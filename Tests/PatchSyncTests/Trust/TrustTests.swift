import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("The TUF trust chain", .tags(.medium))
struct TrustTests {
    /// A fixture with build 1 installed and current, and build 2 published, over file://.
    static func installedWithUpdate() async throws -> (Fixture, Install) {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.01), id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        // Without deltas the sync fetches the whole manifest, the path these tests attack
        // (DeltaSyncTests: a manifest delta that fails its signed hash falls back to it).
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.01), id: "2", deltaSources: 0)
        return (fixture, install)
    }

    /// Writes root version 2 with a new root key, signed by the new key and (when asked) the old one.
    static func rotateRoot(_ fixture: Fixture, signedByOldKey: Bool) throws {
        let newRoot = SigningKey(try Ed25519.generate())
        let first: Signed<RootMetadata> = try Signed(
            parsing: try Data(contentsOf: URL(fileURLWithPath: fixture.origin + "/metadata/1.root.json")),
            name: "1.root.json")
        var next = first.signed
        next.version = 2
        let newID = try newRoot.publicKey.keyID()
        next.keys[newID] = newRoot.publicKey
        next.roles["root"] = TUFRole(keyids: [newID], threshold: 1)
        let signers = signedByOldKey ? [fixture.rootKey, newRoot] : [newRoot]
        try Signed(signing: next, with: signers).serialized()
            .write(to: URL(fileURLWithPath: fixture.origin + "/metadata/2.root.json"))
    }

    /// Runs a sync that must be refused as bad data, and checks that nothing live changed.
    static func expectRefused(_ install: Install, mentioning text: String) async throws {
        let before = try treeFacts(install.root + "/current")
        let error = await #expect(throws: PatchSyncError.self) { try await Syncer(install: install).run() }
        #expect(error?.code == .refusedData)
        #expect(error?.description.contains(text) == true, "\(String(describing: error))")
        #expect(install.currentBuild() == "1")
        #expect(try install.status().ready == nil)
        #expect(try treeFacts(install.root + "/current") == before)
    }

    @Test("metadata written by the publisher verifies through the client workflow")
    func roundTrip() async throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.005), id: "1.0+1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let origin = try Origin(mirrors: [fixture.fileRemote], client: try HTTPClient())
        let trusted = try await TrustClient(directory: install.metadataDirectory, source: origin, now: Date()).refresh()
        let target = try #require(trusted.targets.signed.targets["manifests/live/1.0+1.json.gz"])
        var info = ManifestTargetInfo(channel: "live", buildId: "1.0+1", sequence: 1)
        (info.files, info.size) = (target.custom?.files, target.custom?.size)
        info.published = target.custom?.published
        #expect(target.custom == info)
        #expect(info.published?.by.isEmpty == false, "publish records who published")
        #expect((info.files ?? 0) > 100 && (info.size ?? 0) > 100_000, "publish records the build's files and size")
        #expect(trusted.timestamp.signed.meta["snapshot.json"]?.version == trusted.snapshot.signed.version)
        let repo = try Repository.load(origin: fixture.origin)
        #expect(repo.targetFiles == trusted.targets.signed.targets)
    }

    @Test(
        "targets.json lists only the newest --keep-builds builds of each channel, snapshot pins its length and hash, and a client installs the newest"
    )
    func boundedTargets() async throws {
        let fixture = try Fixture()
        let tree = try fixture.sampleBuild(1, scale: 0.003)
        for release in 1...5 {
            try evolveSample(tree, release)
            try fixture.publish(tree, id: "\(release)", deltaSources: 0, keepBuilds: 3)
        }
        try fixture.publish(tree, id: "b1", channel: "beta", deltaSources: 0, keepBuilds: 3)
        let repo = try Repository.load(origin: fixture.origin)
        let listed = Set(repo.targetFiles.values.compactMap { $0.custom.map { "\($0.channel)/\($0.buildId)" } })
        #expect(listed == ["live/3", "live/4", "live/5", "beta/b1"], "\(listed.sorted())")
        // Snapshot pins targets.json by length and hash as well as version.
        let targetsData = try repo.targets.serialized()
        let pin = try #require(repo.snapshot.signed.meta["targets.json"])
        #expect(pin.version == repo.targets.signed.version)
        #expect(pin.length == targetsData.count && pin.hashes?["sha256"] == SHA256Hasher.hash(targetsData).hex)
        let onDisk = try Data(
            contentsOf: URL(fileURLWithPath: fixture.origin + "/metadata/\(pin.version).targets.json"))
        #expect(onDisk == targetsData)

        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        #expect(try await Syncer(install: install).run().outcome == .ready)
        #expect(try install.applyPendingUpdate().applied)
        #expect(install.currentBuild() == "5")
        // Other bytes for the pinned version, validly signed (a leaked online key, a mirror mixing
        // repositories), are refused: the snapshot's length and hash no longer match.
        var other = repo.targets.signed
        other.expires += 60
        try Signed(signing: other, with: [fixture.onlineKey]).serialized()
            .write(to: URL(fileURLWithPath: fixture.origin + "/metadata/\(pin.version).targets.json"))
        try FileManager.default.removeItem(atPath: install.metadataDirectory + "/targets.json")
        let refused = await #expect(throws: PatchSyncError.self) { try await Syncer(install: install).run() }
        #expect(refused?.code == .refusedData, "\(String(describing: refused))")
    }

    /// Rewrites one file of the sample tree for `release`.
    private func evolveSample(_ tree: String, _ release: Int) throws {
        try Data("release \(release)\n".utf8).write(to: URL(fileURLWithPath: tree + "/config/default.cfg"))
    }

    @Test("a timestamp with a bad signature is refused, the live tree untouched")
    func badSignature() async throws {
        let (fixture, install) = try await Self.installedWithUpdate()
        let path = fixture.origin + "/metadata/timestamp.json"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        let sig = try #require(text.range(of: "\"sig\":\"")).upperBound
        text.replaceSubrange(sig...sig, with: text[sig] == "0" ? "1" : "0")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        try await Self.expectRefused(install, mentioning: "valid signature")
    }

    @Test("an expired timestamp is refused (freeze attack), the live tree untouched")
    func expiredTimestamp() async throws {
        let (fixture, install) = try await Self.installedWithUpdate()
        var repo = try Repository.load(origin: fixture.origin)
        try repo.refresh(key: fixture.onlineKey, now: Date(timeIntervalSinceNow: -30 * 86400))
        try await Self.expectRefused(install, mentioning: "expired")
    }

    @Test("a timestamp older than the trusted one is refused (rollback), the live tree untouched")
    func rollback() async throws {
        let (fixture, install) = try await Self.installedWithUpdate()
        let path = fixture.origin + "/metadata/timestamp.json"
        let old = try Data(contentsOf: URL(fileURLWithPath: path))
        var repo = try Repository.load(origin: fixture.origin)
        try repo.refresh(key: fixture.onlineKey)
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.01), id: "1")  // no-op: already published
        let synced = try await Syncer(install: install).run()
        #expect(synced.buildId == "2")
        try FileManager.default.removeItem(atPath: install.stagedDirectory("2"))
        try install.state().update { if let ready = $0.ready { $0.dropReady(ready) } }
        try old.write(to: URL(fileURLWithPath: path))
        try await Self.expectRefused(install, mentioning: "rollback")
    }

    @Test("a channel whose newest build has a lower sequence than one already seen is refused (rollback)")
    func sequenceRollback() async throws {
        let (fixture, install) = try await Self.installedWithUpdate()
        #expect(try await Syncer(install: install).run().buildId == "2")
        var repo = try Repository.load(origin: fixture.origin)
        try repo.commit(targets: repo.targetFiles.filter { $0.value.custom?.buildId == "1" }, signers: fixture.signers)
        let error = await #expect(throws: PatchSyncError.self) { try await Syncer(install: install).run() }
        #expect(error?.code == .refusedData)
        #expect(error?.description.contains("lower than 2 already seen") == true, "\(String(describing: error))")
        #expect(install.currentBuild() == "1")
        #expect(try install.status().ready == "2", "the staged build stays ready")
    }

    @Test(
        "a repository whose online key also signed targets moves to its own targets key with rotate-root; the online key then cannot change targets, and clients follow"
    )
    func migrateToTargetsKey() async throws {
        let fixture = try Fixture()
        // The layout `repo init` wrote before role keys: one online key for timestamp, snapshot and targets.
        let legacy = fixture.directory + "/legacy"
        var meta = try Repository.load(origin: fixture.origin).root.signed
        let onlineID = try fixture.onlineKey.publicKey.keyID()
        meta.roles["targets"] = TUFRole(keyids: [onlineID], threshold: 1)
        meta.keys = meta.keys.filter { $0.key != (try? fixture.targetsKey.publicKey.keyID()) }
        try FileManager.default.createDirectory(atPath: legacy + "/metadata", withIntermediateDirectories: true)
        let root = try Signed(signing: meta, with: [fixture.rootKey])
        for name in ["1.root.json", "root.json"] {
            try root.serialized().write(to: URL(fileURLWithPath: legacy + "/metadata/" + name))
        }
        var repo = Repository(
            origin: legacy, root: root,
            targets: try Signed(signing: TargetsMetadata(version: 0, expires: Date(), targets: [:]), with: []),
            snapshot: try Signed(signing: SnapshotMetadata(version: 0, expires: Date(), meta: [:]), with: []),
            timestamp: try Signed(signing: TimestampMetadata(version: 0, expires: Date(), meta: [:]), with: []))
        let legacySigners = Repository.Signers(targets: [fixture.onlineKey], online: fixture.onlineKey)
        try repo.commit(targets: [:], signers: legacySigners)
        var options = Publisher.Options(
            buildDirectory: try fixture.sampleBuild(1, scale: 0.01), origin: legacy,
            buildId: try BuildID("1"), bundles: try BundleRules(bundles: [.base]))
        try Publisher(options: options, signers: legacySigners).run()
        let client = try Install.create(
            at: fixture.directory + "/legacy-install",
            config: InstallConfig(remotes: ["file://" + legacy], channel: "live"),
            trustedRoot: legacy + "/metadata/1.root.json")
        #expect(try await Syncer(install: client).run().buildId == "1")

        repo = try Repository.load(origin: legacy)
        let newOnline = SigningKey(try Ed25519.generate())
        let kept = #expect(
            throws: PatchSyncError.self, "a new online key alone would leave the old one signing targets"
        ) {
            try repo.rotateRoot(
                .init(online: newOnline.publicKey), signers: .init(root: [fixture.rootKey], online: newOnline))
        }
        #expect(kept?.remedy?.contains("--new-targets-key") == true)
        try repo.rotateRoot(
            .init(targets: [fixture.targetsKey.publicKey]),
            signers: .init(root: [fixture.rootKey], targets: [fixture.targetsKey], online: fixture.onlineKey))
        options.buildId = try BuildID("2")
        options.buildDirectory = try fixture.sampleBuild(2, scale: 0.01)
        #expect(throws: PatchSyncError.self, "the online key is no longer a targets key") {
            try Publisher(options: options, signers: legacySigners).run()
        }
        try Publisher(options: options, signers: .init(targets: [fixture.targetsKey], online: fixture.onlineKey)).run()
        #expect(try await Syncer(install: client).run().buildId == "2")
    }

    @Test(
        "a targets.json that the online key alone signed (a stolen cron key) is refused by the next publish, never signed over with the targets key"
    )
    func forgedTargetsNotSignedOver() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
        var repo = try Repository.load(origin: fixture.origin)
        var forged = repo.targets.signed
        forged.version += 1
        var info = ManifestTargetInfo(channel: "live", buildId: "evil", sequence: 1_000_000)
        info.files = 1
        forged.targets["manifests/live/evil.json.gz"] = TargetFile(
            length: 1, hashes: ["sha256": String(repeating: "0", count: 64)],
            custom: info)
        repo.targets = try Signed(signing: forged, with: [fixture.onlineKey])
        try repo.targets.serialized().write(
            to: URL(fileURLWithPath: fixture.origin + "/metadata/\(forged.version).targets.json"))
        try repo.refresh(key: fixture.onlineKey)  // snapshot and timestamp, validly signed, pin the forged targets
        let before = try FileManager.default.contentsOfDirectory(atPath: fixture.origin + "/metadata").sorted()
        let error = #expect(throws: PatchSyncError.self) {
            try fixture.publish(try fixture.sampleBuild(2, scale: 0.003), id: "2")
        }
        #expect(
            error?.code == .refusedData && error?.description.contains("not what patchsync signed") == true,
            "\(String(describing: error))")
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.origin + "/metadata").sorted() == before)
    }

    @Test(
        "a channel's sequence never goes back, even when the repository is replaced by another one signed with the same root and the trusted metadata is lost"
    )
    func sequenceSurvivesReplacedRepository() async throws {
        let (fixture, install) = try await Self.installedWithUpdate()
        #expect(try await Syncer(install: install).run().sequence == 2)
        // A second repository, same keys, whose only build on the channel has sequence 1.
        let replacement = fixture.directory + "/replacement"
        var repo = try Repository.create(
            origin: replacement, rootKey: fixture.rootKey, targetsKey: fixture.targetsKey,
            onlineKey: fixture.onlineKey)
        var options = Publisher.Options(
            buildDirectory: try fixture.sampleBuild(1, scale: 0.01), origin: replacement,
            buildId: try BuildID("1-again"), bundles: try BundleRules(bundles: [.base]))
        options.channel = try Channel("live")
        try Publisher(options: options, signers: fixture.signers).run()
        repo = try Repository.load(origin: replacement)
        for _ in 0..<5 { try repo.commit(targets: repo.targetFiles, signers: fixture.signers) }
        try FileManager.default.removeItem(atPath: fixture.origin)
        try FileManager.default.moveItem(atPath: replacement, toPath: fixture.origin)
        for file in ["timestamp.json", "snapshot.json", "targets.json"] {
            try? FileManager.default.removeItem(atPath: install.metadataDirectory + "/" + file)
        }
        let error = await #expect(throws: PatchSyncError.self) { try await Syncer(install: install).run() }
        #expect(error?.code == .refusedData)
        #expect(
            error?.description.contains("sequence 1, lower than 2 already seen") == true, "\(String(describing: error))"
        )
        #expect(install.currentBuild() == "1")
    }

    @Test("a root rotation is followed when both roots sign it, and refused when the old root did not")
    func rootRotation() async throws {
        let (fixture, install) = try await Self.installedWithUpdate()
        try Self.rotateRoot(fixture, signedByOldKey: false)
        try await Self.expectRefused(install, mentioning: "2.root.json")

        #expect(throws: PatchSyncError.self, "the publisher refuses to sign on top of a root the old root did not sign")
        {
            try Repository.load(origin: fixture.origin)
        }
        try Self.rotateRoot(fixture, signedByOldKey: true)
        let repo = try Repository.load(origin: fixture.origin)
        #expect(repo.root.signed.version == 2)
        let report = try await Syncer(install: install).run()
        #expect(report.outcome == .ready)
        let trusted: Signed<RootMetadata> = try Signed(
            parsing: try Data(contentsOf: URL(fileURLWithPath: install.metadataDirectory + "/root.json")), name: "root")
        #expect(trusted.signed.version == 2)
    }

    @Test("a manifest whose bytes differ from its signed target is refused")
    func tamperedManifest() async throws {
        let (fixture, install) = try await Self.installedWithUpdate()
        let dir = fixture.origin + "/targets/manifests/live"
        let name = try #require(
            try FileManager.default.contentsOfDirectory(atPath: dir).first { $0.hasSuffix(".2.json.gz") })
        var data = try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name))
        data[data.count / 2] ^= 0x01
        try data.write(to: URL(fileURLWithPath: dir + "/" + name))
        try await Self.expectRefused(install, mentioning: "SHA-256")
    }
}
