import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Objects in the origin", .tags(.medium))
struct ObjectWriterTests {
    @Test(
        "without packs, an object is named by the file's SHA-256, stores compressible chunks compressed (zstd, format 5; or deflate, format 1) and random ones raw",
        arguments: [ObjectCodec.default, .deflate])
    func layout(codec: ObjectCodec) throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        let report = try fixture.publish(build, id: "1", smallFileBytes: 0, codec: codec)
        #expect(report.objectsWritten > 0)
        let manifest = try Manifest.decode(
            try Data(contentsOf: URL(fileURLWithPath: try DeltaSyncTests.manifestFile(fixture, id: "1"))),
            what: "manifest")
        #expect(
            manifest.formatVersion == Manifest.formatVersion,
            "every build is written in the current format (objects named as 6 does, `.bin` and segments), whatever its codec"
        )
        let level = try #require(manifest.files.first { $0.path.hasSuffix(".map") })
        let texture = try #require(manifest.files.first { $0.path.hasSuffix(".dds") })
        let stored: ChunkCodec = codec.kind == .zstd ? .zstd : .zlib
        #expect(level.chunks.allSatisfy { $0.codec == stored && $0.objectLength < $0.length })
        #expect(texture.chunks.allSatisfy { $0.codec == .raw && $0.objectLength == $0.length })
        for file in [level, texture] {
            #expect(file.object == (try SHA256Digest.of(file: build + "/" + file.path)))
            let size =
                try FileManager.default.attributesOfItem(
                    atPath: fixture.origin + "/" + OriginLayout.object(file.object))[.size] as? Int
            #expect(size == file.chunks.reduce(0) { $0 + $1.objectLength })
        }
    }

    @Test("publishing the same build again writes nothing and keeps the metadata")
    func republishIsNoOp() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.005)
        try fixture.publish(build, id: "1")
        let before = try FileManager.default.contentsOfDirectory(atPath: fixture.origin + "/metadata").sorted()
        let again = try fixture.publish(build, id: "1")
        #expect(again.alreadyPublished)
        #expect(again.objectsWritten == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.origin + "/metadata").sorted() == before)
        let changed = try fixture.sampleBuild(2, scale: 0.005)
        #expect(throws: PatchSyncError.self) { try fixture.publish(changed, id: "1") }
    }

    static let smallChunks = ChunkingParameters(minSize: 16 << 10, averageSize: 64 << 10, maxSize: 256 << 10)

    @Test(
        "content already in the origin keeps its object's layout when published with other chunk sizes: the second channel installs"
    )
    func otherChunking() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1", channel: "beta", chunking: Self.smallChunks)
        let second = try fixture.publish(build, id: "1", chunking: .standard)
        #expect(second.objectsWritten == 0, "the objects are reused as they are")
        try await Self.expectInstalls(fixture, matches: build)
    }

    @Test(
        "publishing with chunks smaller than an existing object's is refused, naming the file and the chunk size to use"
    )
    func smallerChunkingRefused() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1", chunking: .standard)
        let tiny = ChunkingParameters(minSize: 1 << 10, averageSize: 4 << 10, maxSize: 16 << 10)
        let error = try #require(throws: PatchSyncError.self) {
            try fixture.publish(build, id: "2", channel: "beta", chunking: tiny)
        }
        #expect(error.message.contains("already in the origin as object"))
        #expect(error.remedy?.contains("--chunk-size") == true)
        #expect(
            !FileManager.default.fileExists(atPath: fixture.origin + "/targets/manifests/beta"), "nothing was published"
        )
    }

    @Test("an object file that no manifest describes (a publish stopped before its manifest) is replaced, not trusted")
    func leftoverReplaced() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1", channel: "beta")
        let described = try Publisher.describe(buildDirectory: build, bundles: try BundleRules(bundles: [.base]))
        let file = try #require(described.files.max { $0.size < $1.size })
        let changed = fixture.directory + "/build-changed"
        try FileManager.default.copyItem(atPath: build, toPath: changed)
        try Data(repeating: 0x5a, count: 300_000).write(to: URL(fileURLWithPath: changed + "/" + file.path))
        let leftover = fixture.origin + "/" + OriginLayout.object(try SHA256Digest.of(file: changed + "/" + file.path))
        try FileManager.default.createDirectory(
            atPath: (leftover as NSString).deletingLastPathComponent,
            withIntermediateDirectories: true)
        try Data("half an object".utf8).write(to: URL(fileURLWithPath: leftover))
        try fixture.publish(changed, id: "2")
        try await Self.expectInstalls(fixture, matches: changed)
    }

    @Test("content from an older build than each channel's newest reuses its object, found in the older manifest")
    func olderContentReused() async throws {
        let fixture = try Fixture()
        let one = try fixture.sampleBuild(1, scale: 0.01), two = try fixture.sampleBuild(2, scale: 0.01)
        // Files with objects of their own (content in a pack of an older build only is packed again).
        try fixture.publish(one, id: "1", chunking: Self.smallChunks, smallFileBytes: 0)
        try fixture.publish(two, id: "2", chunking: Self.smallChunks, smallFileBytes: 0)
        // build 1's content again, at another chunk size
        let back = try fixture.publish(one, id: "3", smallFileBytes: 0)
        #expect(back.objectsWritten == 0)
        try await Self.expectInstalls(fixture, matches: one)
    }

    @Test("a publish reads the newest manifest of each channel, not the whole history")
    func readsNewestOnly() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.005)
        for id in ["1", "2", "3", "4"] { try fixture.publish(build, id: id, deltaSources: 0) }
        let repo = try Repository.load(origin: fixture.origin)
        let publisher = Publisher(
            options: .init(
                buildDirectory: build, origin: fixture.origin, buildId: try BuildID("5"),
                bundles: try BundleRules(bundles: [.base])), signers: fixture.signers)
        let known = try KnownLayouts(targets: repo.targetFiles) { (path, target) throws(PatchSyncError) in
            try Repository.manifest(in: publisher.options.origin, path, target)
        }
        #expect(known.manifestsRead == 1)
        let leftover = try SHA256Digest.of(Data("not in any build".utf8))
        #expect(try known.layout(of: leftover) == nil)
        #expect(known.manifestsRead == 4, "an object no newest manifest describes sends it through the rest")
    }

    @Test(
        "new objects are placed in batches while others are written: each at its path with its bytes, content written twice placed once, a leftover replaced, no temporary file left"
    )
    func placerBatches() throws {
        let fixture = try Fixture()
        let placer = ObjectPlacer(origin: fixture.origin, batch: 3)
        var expected: [String: Data] = [:]
        var temps: [String] = []
        let incoming = fixture.origin + "/objects/.incoming/0"
        try FileManager.default.createDirectory(atPath: incoming, withIntermediateDirectories: true)
        for i in 0..<8 {
            let content = Data("object \(i % 7)".utf8)  // 7 and 0 have the same content
            let final = fixture.origin + "/" + OriginLayout.object(SHA256Digest.of(content))
            let temp = incoming + "/\(i)"
            try content.write(to: URL(fileURLWithPath: temp))
            if i == 2 {  // a leftover at this object's path, from a publish that stopped early
                try FileManager.default.createDirectory(
                    atPath: (final as NSString).deletingLastPathComponent,
                    withIntermediateDirectories: true)
                try Data("torn".utf8).write(to: URL(fileURLWithPath: final))
            }
            expected[final] = content
            temps.append(temp)
            placer.add(.init(temp: temp, final: final))
        }
        let dropped = try placer.finish()
        #expect(dropped == [incoming + "/7"])
        for (final, content) in expected { #expect(try Data(contentsOf: URL(fileURLWithPath: final)) == content) }
        #expect(temps.allSatisfy { !FileManager.default.fileExists(atPath: $0) })
    }

    /// A fresh install of the origin's live channel syncs, applies, and matches `build`.
    /// The manifest of build `id` as published in the fixture's origin.
    static func manifest(_ fixture: Fixture, _ id: String, channel: String = "live") throws -> Manifest {
        try Manifest.decode(
            try Data(
                contentsOf: URL(fileURLWithPath: try DeltaSyncTests.manifestFile(fixture, id: id, channel: channel))),
            what: "manifest \(id)")
    }

    @Test(
        "small files go into packs: many files per object, each chunk at its offset, and a fresh install matches the build",
        arguments: [ObjectCodec.default, .deflate])
    func packs(codec: ObjectCodec) async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        let report = try fixture.publish(build, id: "1", smallFileBytes: 128 << 10, codec: codec)
        let manifest = try Self.manifest(fixture, "1")
        #expect(manifest.formatVersion == Manifest.formatVersion)
        let small = manifest.files.filter { $0.size <= 128 << 10 && $0.size > 0 }
        let packs = Set(small.map(\.object))
        try #require(small.count > 20)
        #expect(packs.count * 10 < small.count, "\(small.count) small files in \(packs.count) packs")
        #expect(small.allSatisfy { $0.object != $0.sha256 })
        #expect(report.objectsWritten == packs.count + manifest.files.filter { $0.size > 128 << 10 }.count)
        // Each chunk's stored bytes sit in its pack at its offset and inflate to the chunk.
        let inflater = Decompressor()
        for file in small.prefix(50) {
            let pack = try Data(
                contentsOf: URL(fileURLWithPath: fixture.origin + "/" + OriginLayout.object(file.object)))
            #expect(SHA256Hasher.hash(pack) == file.object, "a pack is named by its SHA-256")
            for chunk in file.chunks {
                let stored = pack[Int(chunk.objectOffset)..<(Int(chunk.objectOffset) + chunk.objectLength)]
                var scratch = [UInt8](repeating: 0, count: chunk.length)
                let verified = stored.withUnsafeBytes { s in
                    scratch.withUnsafeMutableBytes {
                        chunk.verifiedContent(of: s, scratch: $0, decompressor: inflater) != nil
                    }
                }
                #expect(verified, "\(file.path) chunk at \(chunk.offset)")
            }
        }
        try await Self.expectInstalls(fixture, matches: build)
    }

    @Test(
        "packed content is deduplicated across builds and channels: a later build and another channel place unchanged small files where they are"
    )
    func packsDedup() throws {
        let fixture = try Fixture()
        let one = try fixture.sampleBuild(1, scale: 0.01), two = try fixture.sampleBuild(2, scale: 0.01)
        try fixture.publish(one, id: "1")
        let first = try Self.manifest(fixture, "1")
        let report = try fixture.publish(two, id: "2")
        let second = try Self.manifest(fixture, "2")
        let placed = Dictionary(first.files.map { ($0.sha256, $0) }, uniquingKeysWith: { a, _ in a })
        let unchanged = second.files.filter { placed[$0.sha256] != nil && $0.size > 0 }
        try #require(unchanged.count > 20)
        #expect(
            unchanged.allSatisfy { placed[$0.sha256]?.object == $0.object && placed[$0.sha256]?.chunks == $0.chunks })
        let changed = second.files.filter { placed[$0.sha256] == nil }
        #expect(report.objectsWritten <= changed.count, "only new content is written: \(report.objectsWritten) objects")
        let beta = try fixture.publish(two, id: "2", channel: "beta")
        #expect(beta.objectsWritten == 0, "another channel's copy of the same build writes nothing")
        let again = try fixture.publish(one, id: "1")
        #expect(again.alreadyPublished, "republishing an older build finds its packed content in its own manifest")
    }

    @Test("a pack with one flipped byte is refused (65) and nothing goes live; the untouched origin then installs")
    func tamperedPack() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1")
        let manifest = try Self.manifest(fixture, "1")
        let packed = try #require(manifest.files.first { $0.object != $0.sha256 && !$0.chunks.isEmpty })
        let path = fixture.origin + "/" + OriginLayout.object(packed.object)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let at = Int(packed.chunks[0].objectOffset) + packed.chunks[0].objectLength / 2
        bytes[at] ^= 0x5a
        try bytes.write(to: URL(fileURLWithPath: path))
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let error = await #expect(throws: PatchSyncError.self) { try await Syncer(install: install).run() }
        #expect(error?.code == .refusedData, "\(String(describing: error))")
        #expect(install.currentDeployment() == nil)
        #expect(try install.status().ready == nil)
        bytes[at] ^= 0x5a
        try bytes.write(to: URL(fileURLWithPath: path))
        #expect(try await Syncer(install: install).run().outcome == .ready)
        _ = try install.applyPendingUpdate()
        try EndToEndTests.expectInstalled(install, matches: build)
    }

    @Test("files of different bundles share a pack: both bundles' files name it, and a fresh install matches the build")
    func packAcrossBundles() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        var options = Publisher.Options(
            buildDirectory: build, origin: fixture.origin, buildId: try BuildID("1"),
            bundles: try BundleRules(bundles: [
                Bundle(name: "textures", required: false, priority: 5, paths: ["textures/**"]),
                Bundle(name: "base", required: true, priority: 0, paths: ["**"])
            ]))
        options.smallFileBytes = 1 << 20
        options.packSize = 64 << 20  // one pack for all small files
        try Publisher(options: options, signers: fixture.signers).run()
        let manifest = try Self.manifest(fixture, "1")
        let bundlesPerObject = Dictionary(grouping: manifest.files.filter { !$0.chunks.isEmpty }, by: \.object)
            .mapValues { Set($0.map(\.bundle)) }
        #expect(bundlesPerObject.values.contains { $0 == ["textures", "base"] }, "\(bundlesPerObject.values)")
        try await Self.expectInstalls(fixture, matches: build)
    }

    static func expectInstalls(_ fixture: Fixture, matches build: String) async throws {
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        #expect(try await Syncer(install: install).run().outcome == .ready)
        _ = try install.applyPendingUpdate()
        try EndToEndTests.expectInstalled(install, matches: build)
    }
}
