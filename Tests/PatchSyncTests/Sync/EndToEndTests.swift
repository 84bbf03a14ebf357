import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Publish, sync and apply against nginx", .tags(.large))
struct EndToEndTests {
    /// Checks that `current` holds exactly the build folder: every file's SHA-256, and its mode without write bits.
    static func expectInstalled(_ install: Install, matches build: String) throws {
        let installed = try treeFacts(install.root + "/current")
        let expected = try treeFacts(build).mapValues { FileFacts(sha256: $0.sha256, mode: $0.mode & 0o555) }
        let differing = Set(installed.keys).union(expected.keys).filter { installed[$0] != expected[$0] }.sorted()
        #expect(differing.isEmpty, "files that differ from the build: \(differing.prefix(10))")
    }

    /// The compressed bytes of the distinct chunks of `new` that `old` does not have.
    static func missingChunkBytes(_ new: Manifest, given old: Manifest?) -> Int64 {
        let have = Set(old?.files.flatMap { $0.chunks.map(\.sha256) } ?? [])
        var seen = Set<SHA256Digest>(), total: Int64 = 0
        for chunk in new.files.flatMap(\.chunks)
        where !have.contains(chunk.sha256) && seen.insert(chunk.sha256).inserted {
            total += Int64(chunk.objectLength)
        }
        return total
    }

    @Test(
        "a fresh install is byte-identical to the build, and the patch 1→2 fetches little more than the changed chunks")
    func installAndPatch() async throws {
        let fixture = try Fixture()
        let build1 = try fixture.sampleBuild(1, scale: 0.05), build2 = try fixture.sampleBuild(2, scale: 0.05)
        // One object per file: hundreds of requests, so that keep-alive shows (packs: ObjectWriterTests).
        try fixture.publish(build1, id: "1.0+1", smallFileBytes: 0)
        let nginx = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: [nginx.url])

        let first = try await Syncer(install: install).run()
        #expect(first.outcome == .ready)
        #expect(install.currentBuild() == nil, "sync never touches the live tree")
        #expect(try install.applyPendingUpdate().applied)
        try Self.expectInstalled(install, matches: build1)
        let manifest1 = try install.manifest(of: "1.0+1")
        #expect(nginx.bytesServed(under: "/objects/") == Self.missingChunkBytes(manifest1, given: nil))

        // the chunk path (DeltaSyncTests: the delta path)
        try fixture.publish(build2, id: "1.1+2", deltaSources: 0, smallFileBytes: 0)
        let before = nginx.bytesServed(under: "/objects/"), metaBefore = nginx.bytesServed() - before
        let patch = try await Syncer(install: install).run()
        let fetched = nginx.bytesServed(under: "/objects/") - before
        let metadata = nginx.bytesServed() - nginx.bytesServed(under: "/objects/") - metaBefore
        let manifest2 = try install.manifest(of: "1.1+2")
        let lacking = Self.missingChunkBytes(manifest2, given: manifest1)
        #expect(lacking > 0)
        #expect(Double(fetched) <= 1.1 * Double(lacking), "fetched \(fetched) for \(lacking) of changed chunks")
        let predicted = PatchDiff(old: manifest1, new: manifest2, oldName: "1", newName: "2").total.downloadBytes
        #expect(
            abs(Double(predicted - fetched)) <= 0.02 * Double(fetched),
            "diff predicted \(predicted), sync fetched \(fetched)")
        #expect(patch.bytesReceived == fetched + metadata)
        #expect(patch.filesLinked > 300)
        #expect(install.currentBuild() == "1.0+1")
        let applied = try install.applyPendingUpdate()
        #expect(applied.current == "1.1+2" && applied.previous == "1.0+1")
        try Self.expectInstalled(install, matches: build2)

        let objectRequests = nginx.requests().filter { $0.path.hasPrefix("/objects/") }
        #expect(objectRequests.allSatisfy { $0.status == 206 && $0.range.hasPrefix("bytes=") })
        let connections = Set(objectRequests.map(\.connection)).count
        // Two syncs of at most 6 connections each; on a loaded machine libcurl may drop a connection idle past
        // its 118 s maximum age and open another, so the bound leaves room for that, and reuse is the ratio.
        #expect(
            connections <= 3 * 6 && objectRequests.count > 4 * connections,
            "keep-alive: \(objectRequests.count) requests on \(connections) connections")
        #expect(FileManager.default.fileExists(atPath: install.root + "/builds/1.0+1"), "the previous build is kept")

        let again = try await Syncer(install: install).run()
        #expect(again.outcome == .upToDate)
        #expect(nginx.bytesServed(under: "/objects/") - before == fetched, "an up-to-date sync fetches no objects")
    }

    @Test("a third build collects the oldest: current and previous stay")
    func garbageCollection() async throws {
        let fixture = try Fixture()
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        for id in ["a", "b", "c"] { try await RollbackTests.release(id, fixture, install) }
        _ = try await Syncer(install: install).run()
        let status = try install.status(diskUsage: true)
        #expect(status.current == "c" && status.previous == "b")
        #expect(status.builds.map(\.name) == ["b", "c"])
        #expect(status.builds.allSatisfy { ($0.diskBytes ?? 0) > 0 })
        #expect(
            try install.status().builds.allSatisfy { $0.diskBytes == nil }, "disk use is walked only when asked for")
        #expect(try RollbackTests.version(install) == "build c")
    }

    @Test("mirrors are tried in order: a dead first mirror falls over to the next")
    func failover() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: ["http://127.0.0.1:1", nginx.url])
        #expect(try await Syncer(install: install).run().outcome == .ready)
        _ = try install.applyPendingUpdate()
        try Self.expectInstalled(install, matches: build)
    }

    @Test(
        "a bandwidth cap is for the network: a capped sync from a file:// origin completes (libcurl cannot pause file transfers)"
    )
    func capWithFileOrigin() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote]) { $0.maxBytesPerSecond = 64 << 10 }
        #expect(try await Syncer(install: install).run().outcome == .ready)
        _ = try install.applyPendingUpdate()
        try Self.expectInstalled(install, matches: build)
    }

    @Test("a sync from a file:// origin installs the same tree")
    func fileOrigin() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        try Self.expectInstalled(install, matches: build)
    }
}

@Suite("The stat cache and the live tree", .tags(.medium))
struct LiveTreeTests {
    @Test("a live file changed behind PatchSync's back is neither linked nor copied from: it is fetched")
    func damagedLiveFileIsNotReused() async throws {
        let fixture = try Fixture()
        let build1 = try fixture.sampleBuild(1, scale: 0.01), build2 = try fixture.sampleBuild(2, scale: 0.01)
        try fixture.publish(build1, id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        let damaged = install.root + "/current/textures/tex_1.dds"  // unchanged in build 2
        try overwriteInPlace(damaged, at: 100, count: 64)

        try fixture.publish(build2, id: "2")
        let report = try await Syncer(install: install).run()
        #expect(report.outcome == .ready)
        #expect(report.chunksFetched > 0)
        _ = try install.applyPendingUpdate()
        try EndToEndTests.expectInstalled(install, matches: build2)
    }

    @Test("an unchanged live tree is trusted through the stat cache without re-hashing")
    func statCacheTrusted() async throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.005), id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try await Syncer(install: install).run()
        _ = try install.applyPendingUpdate()
        let state = try install.state()
        let manifest = try install.manifest(of: "1")
        #expect(try state.statCache(build: "1").count == manifest.files.count)
        // A cache entry that disagrees forces a re-hash; the re-hash confirms the file and refreshes the entry.
        let path = manifest.files[0].path
        try state.database.run("UPDATE stat_cache SET mtime_ns = 1 WHERE path = ?", rows: [[.text(path)]])
        let live = try LiveTree(manifest: manifest, directory: install.root + "/current", build: "1", state: state)
        #expect(live.linkable.count == Set(manifest.files.map(Plan.Content.init)).count)
        #expect(try state.statCache(build: "1")[path]?.modifiedNanoseconds != 1)
    }
}

@Suite("https origins", .tags(.large))
struct TLSTests {
    @Test("an https origin is used with its CA, and refused when its certificate cannot be verified")
    func verifiedTLS() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin, tls: true)
        #expect(nginx.url.hasPrefix("https://"))

        let untrusting = try fixture.makeInstall("untrusting", remotes: [nginx.url])
        let error = await #expect(throws: PatchSyncError.self) { try await Syncer(install: untrusting).run() }
        #expect(error?.code == .originUnavailable)
        #expect(error?.description.lowercased().contains("certificate") == true, "\(String(describing: error))")

        let trusting = try fixture.makeInstall("trusting", remotes: [nginx.url]) { $0.caFile = nginx.caFile }
        #expect(try await Syncer(install: trusting).run().outcome == .ready)
        _ = try trusting.applyPendingUpdate()
        try EndToEndTests.expectInstalled(trusting, matches: build)

        // A first mirror whose certificate does not verify is passed over (not retried), not a failure.
        let second = try fixture.makeInstall("second", remotes: [nginx.url, fixture.fileRemote])
        #expect(try await Syncer(install: second).run().outcome == .ready)
    }
}
