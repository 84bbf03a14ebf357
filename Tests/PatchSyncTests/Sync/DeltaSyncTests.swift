import Foundation
import PatchSyncTestSupport
import Synchronization
import Testing

@testable import PatchSync

@Suite("The delta path: changed files rebuilt from the live build", .tags(.large))
struct DeltaSyncTests {
    /// Publishes and installs build 1, publishes build 2 (with `deltaSources`), and returns the pieces.
    static func installedOne(
        deltaSources: Int = 2, remote: (Fixture) throws -> String = { $0.fileRemote },
        configure: (inout InstallConfig) -> Void = { _ in }
    )
        throws -> (Fixture, Install, build2: String)
    {
        let fixture = try Fixture()
        let build1 = try fixture.sampleBuild(1, scale: 0.05), build2 = try fixture.sampleBuild(2, scale: 0.05)
        try fixture.publish(build1, id: "1", deltaSources: 0)
        let install = try fixture.makeInstall(remotes: [try remote(fixture)], configure: configure)
        return (fixture, install, build2)
    }

    /// ``installedOne`` with the install following an nginx origin on loopback (for bytes and requests served).
    static func installedOneThroughNginx() throws -> (Fixture, Install, build2: String, nginx: NginxOrigin) {
        var nginx: NginxOrigin?
        let (fixture, install, build2) = try installedOne { fixture in
            nginx = try NginxOrigin(root: fixture.origin)
            return nginx!.url
        }
        return (fixture, install, build2, try #require(nginx))
    }

    static func syncAndApply(_ install: Install) async throws -> SyncReport {
        let report = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        return report
    }

    @Test(
        "with a pack from the installed build, changed files are patched: fewer bytes than their chunks, identical result"
    )
    func patchesThroughNginx() async throws {
        let (fixture, install, build2, nginx) = try Self.installedOneThroughNginx()
        _ = try await Self.syncAndApply(install)
        let report = try fixture.publish(build2, id: "2")
        #expect(report.deltas.map(\.from) == ["1"] && report.deltas[0].files >= 5)
        let manifest1 = try install.manifest(of: "1")
        let before = nginx.bytesServed(under: "/objects/")

        let patch = try await Syncer(install: install).run()
        let routes = try install.status().routes
        _ = try install.applyPendingUpdate()
        let fetched = nginx.bytesServed(under: "/objects/") - before
        let manifest2 = try install.manifest(of: "2")
        let chunkPath = EndToEndTests.missingChunkBytes(manifest2, given: manifest1)
        #expect(patch.filesPatched == report.deltas[0].files && patch.deltaFallbacks == 0)
        #expect(patch.deltaBytes == report.deltas[0].bytes)
        #expect(Double(fetched) < 0.8 * Double(chunkPath), "fetched \(fetched); the chunks alone are \(chunkPath)")
        let wholeManifests = nginx.requests().filter {
            $0.path.hasPrefix("/targets/") && $0.path.hasSuffix(".2.json.gz")
        }
        #expect(wholeManifests.isEmpty, "build 2's manifest is rebuilt from build 1's with a signed manifest delta")
        let listed = try Repository.load(origin: fixture.origin).targetFiles[
            Manifest.targetPath(channel: .live, buildId: try BuildID("2"))]
        #expect(
            listed?.custom?.manifestDeltas?.map(\.codec) == ["zstd"],
            "between binary manifests the delta is zstd's prefix mode")
        #expect(
            routes
                == InstallStatus.Routes(
                    buildId: routes?.buildId ?? "", linked: patch.filesLinked,
                    delta: patch.filesPatched, chunks: patch.filesAssembled - patch.filesPatched))

        // diff shows the same routes, and predicts what the sync fetched.
        let shares = try await DiffSide.deltaShares(new: manifest2, newSpec: nginx.url, old: manifest1)
        let diff = PatchDiff(old: manifest1, new: manifest2, oldName: "1", newName: "2", deltas: shares)
        #expect(diff.total.filesPatched == patch.filesPatched)
        #expect(diff.files.filter { $0.route == .delta }.count == patch.filesPatched)
        // A delta only where it beats the file's new chunks: an edited level has one, a texture replaced
        // by new content (its delta would be all literals) has none.
        #expect(diff.files.first { $0.path == "levels/level_2.map" }?.route == .delta)
        #expect(diff.files.first { $0.path == "textures/tex_0.dds" }?.route == .chunks)
        #expect(
            abs(Double(diff.total.downloadBytes - fetched)) <= 0.05 * Double(fetched),
            "diff predicted \(diff.total.downloadBytes), sync fetched \(fetched)")
        try EndToEndTests.expectInstalled(install, matches: build2)
        #expect(!FileManager.default.fileExists(atPath: install.deltasDirectory), "the pack is removed once staged")
    }

    @Test(
        "progress counts the delta pack, then the chunks, on one scale: the pack's download reports its bytes, done only grows and ends at the pack's bytes plus the chunks'"
    )
    func progressCountsThePack() async throws {
        let (fixture, install, build2) = try Self.installedOne()
        _ = try await Self.syncAndApply(install)
        let published = try fixture.publish(build2, id: "2")
        let packReport = try #require(published.deltas.first)
        let manifest = try Manifest.decode(
            try Data(contentsOf: URL(fileURLWithPath: try Self.manifestFile(fixture, id: "2"))),
            what: "manifest 2")
        let pack = try #require(manifest.deltas?.first)

        // The download reports the bytes so far as they arrive.
        let seenBytes = Mutex<[Int64]>([])
        let origin = try Origin(mirrors: [fixture.fileRemote], client: try HTTPClient())
        _ = try await origin.download(
            OriginLayout.object(pack.object), to: fixture.directory + "/pack", length: pack.length,
            sha256: pack.object
        ) { have in seenBytes.withLock { $0.append(have) } }
        let bytes = seenBytes.withLock { $0 }
        #expect(!bytes.isEmpty && bytes.last == pack.length && zip(bytes, bytes.dropFirst()).allSatisfy { $0 <= $1 })

        // The sync's events count the pack first, then the chunks.
        let events = Mutex<[(done: Int64, total: Int64)]>([])
        let report = try await Syncer(install: install).run { event in
            if case .transfer(let s) = event { events.withLock { $0.append((s.done, s.total)) } }
        }
        let seen = events.withLock { $0 }
        #expect(report.filesPatched > 0 && report.deltaBytes == packReport.bytes)
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0.done <= $1.done }, "done only grows: \(seen.map(\.done))")
        let last = try #require(seen.last)
        #expect(last.done == last.total && last.total == packReport.bytes + report.bytesPlanned)
    }

    /// The manifest file of build `id` on the live channel, in the origin.
    static func manifestFile(_ fixture: Fixture, id: String, channel: String = "live") throws -> String {
        let dir = fixture.origin + "/targets/manifests/" + channel
        return dir + "/"
            + (try #require(
                try FileManager.default.contentsOfDirectory(atPath: dir)
                    .first { $0.hasSuffix(".\(id).json.gz") }))
    }

    @Test(
        "a file that moved to another folder and changed is rebuilt from the old file of its name, by the smaller of our delta and a zstd frame with the old file as prefix: the manifest names the source, the player fetches less than its new chunks, diff predicts the route, and the result is byte-exact"
    )
    func movedFileIsPatchedFromItsOldPlace() async throws {
        let (fixture, install, _, nginx) = try Self.installedOneThroughNginx()
        var generator = SeededRandom(seed: 11)
        let text = (0..<(900 << 10)).map { _ in UInt8(97 + generator.next() % 26) }
        let build1 = try fixture.sampleBuild(1, scale: 0.05)
        try Data(text).write(to: URL(fileURLWithPath: build1 + "/levels/forest.map"))
        // A file whose new version is its old bytes cut in 24-byte pieces and shuffled: matches too short
        // and too scattered for our delta, a zstd frame with the old file as prefix takes them.
        let pieces = stride(from: 0, to: 300 << 10, by: 24).map { Array(text[$0..<($0 + 24)]) }
        try Data(pieces.joined()).write(to: URL(fileURLWithPath: build1 + "/levels/desert.map"))
        try fixture.publish(build1, id: "1b", deltaSources: 0)
        _ = try await Self.syncAndApply(install)
        let build2 = fixture.directory + "/build-moved"
        try FileManager.default.copyItem(atPath: build1, toPath: build2)
        try FileManager.default.createDirectory(atPath: build2 + "/levels/old", withIntermediateDirectories: true)
        var edited = text
        edited.replaceSubrange((450 << 10)..<((450 << 10) + 512), with: repeatElement(UInt8(ascii: "#"), count: 512))
        try FileManager.default.removeItem(atPath: build2 + "/levels/forest.map")
        try Data(edited).write(to: URL(fileURLWithPath: build2 + "/levels/old/forest.map"))
        try FileManager.default.removeItem(atPath: build2 + "/levels/desert.map")
        try Data(pieces.shuffled(using: &generator).joined()).write(
            to: URL(fileURLWithPath: build2 + "/levels/old/desert.map"))
        let report = try fixture.publish(build2, id: "2")
        let manifest2 = try Manifest.decode(
            try Data(contentsOf: URL(fileURLWithPath: try Self.manifestFile(fixture, id: "2"))), what: "2")
        let pack = try #require(manifest2.deltas?.first { $0.from.value == "1b" })
        #expect(
            pack.moved == ["levels/old/forest.map": "levels/forest.map", "levels/old/desert.map": "levels/desert.map"],
            "the manifest names the moved files' sources")
        var kinds: [String: String] = [:]
        try DeltaPack.read(
            try FileDescriptor(path: OriginLayout(root: fixture.origin).objectFile(pack.object), flags: O_RDONLY)
        ) { (index, delta) throws(PatchSyncError) in
            kinds[manifest2.files[index].path] = Zstd.isFrame(delta) ? "zstd" : "ours"
        }
        #expect(
            kinds == ["levels/old/forest.map": "ours", "levels/old/desert.map": "zstd"],
            "the smaller delta of each file: ours for an edit in place, zstd's for shuffled pieces")
        let manifest1 = try install.manifest(of: "1b")
        let shares = try await DiffSide.deltaShares(new: manifest2, newSpec: nginx.url, old: manifest1)
        let diff = PatchDiff(old: manifest1, new: manifest2, oldName: "1b", newName: "2", deltas: shares)
        #expect(
            diff.files.filter { $0.path.hasPrefix("levels/old/") }.map(\.route) == [.delta, .delta],
            "diff predicts both deltas")

        let before = nginx.bytesServed(under: "/objects/")
        let patch = try await Self.syncAndApply(install)
        let fetched = nginx.bytesServed(under: "/objects/") - before
        let oldChunks = Set(manifest1.files.flatMap { $0.chunks.map(\.sha256) })
        let newChunkBytes = manifest2.files.filter { $0.path.hasPrefix("levels/old/") }.flatMap(\.chunks)
            .filter { !oldChunks.contains($0.sha256) }.reduce(0) { $0 + $1.objectLength }
        #expect(patch.filesPatched == report.deltas[0].files && patch.deltaFallbacks == 0)
        #expect(
            patch.filesPatched >= 1 && fetched < newChunkBytes,
            "fetched \(fetched); its new chunks are \(newChunkBytes)")
        try EndToEndTests.expectInstalled(install, matches: build2)
    }

    @Test("a live file that is no longer the delta's source is not patched: its chunks are fetched")
    func changedLiveFileGoesByChunks() async throws {
        let (fixture, install, build2) = try Self.installedOne()
        _ = try await Self.syncAndApply(install)
        let report = try fixture.publish(build2, id: "2")
        let edited = install.root + "/current/levels/level_2.map"
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: edited)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: edited))
        try handle.write(contentsOf: Data("modded".utf8))
        try handle.close()
        try FileManager.default.setAttributes([.posixPermissions: 0o444], ofItemAtPath: edited)  // same size and mode

        let patch = try await Self.syncAndApply(install)
        #expect(
            patch.filesPatched == report.deltas[0].files - 1 && patch.deltaFallbacks == 0,
            "\(patch.filesPatched) patched of \(report.deltas[0].files)")
        try EndToEndTests.expectInstalled(install, matches: build2)
    }

    @Test("a delta whose result fails the chunk hashes is refused, and those chunks are fetched instead")
    func wrongDeltaFallsBack() async throws {
        let (fixture, install, build2) = try Self.installedOne()
        _ = try await Self.syncAndApply(install)
        try fixture.publish(build2, id: "2", deltaSources: 0)
        // A publisher bug: deltas that build each file with one byte flipped, signed all the same.
        let manifest1 = try install.manifest(of: "1")
        var repo = try Repository.load(origin: fixture.origin)
        let target = Manifest.targetPath(channel: .live, buildId: try BuildID("2"))
        let publisher = Publisher(
            options: .init(
                buildDirectory: build2, origin: fixture.origin, buildId: try BuildID("2"),
                bundles: try BundleRules(bundles: [.base])), signers: fixture.signers)
        var manifest2 = try Repository.manifest(in: publisher.options.origin, target, repo.targetFiles[target]!)
        let before = Dictionary(uniqueKeysWithValues: manifest1.files.map { ($0.path, $0) })
        let packPath = fixture.directory + "/wrong.pack"
        let output = try FileDescriptor(path: packPath, flags: O_WRONLY | O_CREAT, mode: 0o644)
        var writer = try DeltaPack.Writer(writingTo: output, codec: .default)
        var wrong: [String] = []
        for (index, file) in manifest2.files.enumerated() {
            guard let old = before[file.path], old.sha256 != file.sha256, old.size > 4096 else { continue }
            let source = [UInt8](try Data(contentsOf: URL(fileURLWithPath: install.root + "/current/" + file.path)))
            var newBytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: build2 + "/" + file.path)))
            newBytes[newBytes.count / 2] ^= 0xff
            try writer.append(file: index, instructions: DeltaTests.encode(source, newBytes))
            wrong.append(file.path)
        }
        let sha = try writer.finish()
        try FileManager.default.createDirectory(
            atPath: fixture.origin + "/objects/" + sha.hex.prefix(2),
            withIntermediateDirectories: true)
        try FileManager.default.moveItem(atPath: packPath, toPath: fixture.origin + "/" + OriginLayout.object(sha))
        manifest2.deltas = [DeltaSource(from: try BuildID("1"), object: sha, length: writer.length, files: wrong.count)]
        try publisher.writer.write(manifest2, target: target, repo: &repo)

        let patch = try await Self.syncAndApply(install)
        #expect(wrong.count >= 3)
        #expect(patch.deltaFallbacks == wrong.count && patch.filesPatched == 0)
        let have = Set(manifest1.files.flatMap { $0.chunks.map(\.sha256) })
        let chunkPath = Set(manifest2.files.flatMap { $0.chunks.map(\.sha256) }.filter { !have.contains($0) }).count
        #expect(
            patch.chunksFetched >= wrong.count && patch.chunksFetched < chunkPath,
            "the chunks the deltas built right are kept: \(patch.chunksFetched) fetched; \(chunkPath) without deltas")
        try EndToEndTests.expectInstalled(install, matches: build2)
    }

    @Test(
        "a pack or manifest delta that does not match its signed hash is refused: the whole manifest and chunks come instead"
    )
    func tamperedPackFallsBack() async throws {
        let (fixture, install, build2) = try Self.installedOne()
        _ = try await Self.syncAndApply(install)
        let report = try fixture.publish(build2, id: "2")
        let target = Manifest.targetPath(channel: .live, buildId: try BuildID("2"))
        let repo = try Repository.load(origin: fixture.origin)
        let publisher = Publisher(
            options: .init(
                buildDirectory: build2, origin: fixture.origin, buildId: try BuildID("2"),
                bundles: try BundleRules(bundles: [.base])), signers: fixture.signers)
        let pack = try #require(
            try Repository.manifest(in: publisher.options.origin, target, repo.targetFiles[target]!).deltas?.first)
        let manifestDelta = try #require(repo.targetFiles[target]?.custom?.manifestDeltas?.first)
        // Both the pack and the manifest delta are damaged: the sync falls back to the whole manifest and chunks.
        for path in [
            OriginLayout.object(pack.object), OriginLayout.object(try #require(SHA256Digest(hex: manifestDelta.object)))
        ] {
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: fixture.origin + "/" + path)))
            bytes[bytes.count - 10] ^= 0x01
            try Data(bytes).write(to: URL(fileURLWithPath: fixture.origin + "/" + path))
        }

        let patch = try await Self.syncAndApply(install)
        #expect(patch.filesPatched == 0 && patch.deltaFallbacks == report.deltas[0].files)
        try EndToEndTests.expectInstalled(install, matches: build2)
    }
}
