import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("Syncs that are killed or lied to", .tags(.cli))
struct ResilienceTests {
    @Test("a sync killed with SIGKILL mid-transfer resumes, re-fetching at most what was in flight")
    func killAndResume() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.06)
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin, rateLimit: "300k")
        let connections = 2, maxRequest = 256 << 10
        let install = try fixture.makeInstall(remotes: [nginx.url]) {
            $0.maxConnections = connections
            $0.maxRequestBytes = maxRequest
        }
        let sync = try CLI.start(["sync", "--install", install.root])
        var progress: InstallStatus.Staging?
        try Poll.until(timeout: .seconds(60)) {
            progress = try install.status().staging
            return !sync.process.isRunning || (progress?.chunksDone ?? 0) >= 4
        }
        kill(sync.process.processIdentifier, SIGKILL)
        sync.process.waitUntilExit()
        #expect(sync.process.terminationReason == .uncaughtSignal, "the sync finished before it could be killed")
        let interrupted = try #require(try install.status().staging)
        #expect(interrupted.chunksDone >= 4 && interrupted.chunksDone < interrupted.chunksTotal)
        #expect(try install.status().ready == nil)

        let resumed = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(try install.status().ready == "1")
        _ = try install.applyPendingUpdate()
        let installed = try treeFacts(install.root + "/current")
        #expect(installed == (try treeFacts(build)).mapValues { FileFacts(sha256: $0.sha256, mode: $0.mode & 0o555) })

        let manifest = try Manifest.decode(
            try Data(
                contentsOf: URL(
                    fileURLWithPath: install.root
                        + "/.patchsync/manifests/1.json.gz")), what: "manifest")
        var seen = Set<SHA256Digest>(), needed: Int64 = 0, largest = 0
        for chunk in manifest.files.flatMap(\.chunks) where seen.insert(chunk.sha256).inserted {
            needed += Int64(chunk.objectLength)
            largest = max(largest, chunk.objectLength)
        }
        let fetchedTwice = nginx.bytesServed(under: "/objects/") - needed
        let inFlight = Int64(connections * max(maxRequest, largest))
        #expect(fetchedTwice >= 0)
        #expect(fetchedTwice <= inFlight, "re-fetched \(fetchedTwice) bytes; at most \(inFlight) were in flight")
    }

    @Test("one flipped byte in one object: exit 65 naming the object, nothing ready, current unchanged")
    func tamperedObject() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.02), id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: [nginx.url])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        let before = try treeFacts(install.root + "/current")

        // The chunk path (without deltas the changed files' objects are fetched; DeltaSyncTests: a tampered pack).
        let report = try fixture.publish(try fixture.sampleBuild(2, scale: 0.02), id: "2", deltaSources: 0)
        #expect(report.objectsWritten > 0)
        let manifest = try Manifest.decode(
            try Data(contentsOf: URL(fileURLWithPath: try manifestPath(fixture, "2"))),
            what: "manifest")
        let old = Set(try treeFacts(install.root + "/current").values.map(\.sha256))
        let target = try #require(manifest.files.filter { !old.contains($0.sha256.hex) }.max { $0.size < $1.size })
        let objectPath = fixture.origin + "/" + OriginLayout.object(target.object)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: objectPath))
        bytes[bytes.count / 2] ^= 0x40
        try bytes.write(to: URL(fileURLWithPath: objectPath))

        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 65)
        #expect(result.stderr.contains(target.object.hex), "\(result.stderr)")
        #expect(try install.status().ready == nil)
        #expect(install.currentBuild() == "1")
        #expect(try treeFacts(install.root + "/current") == before)
    }

    func manifestPath(_ fixture: Fixture, _ build: String) throws -> String {
        let dir = fixture.origin + "/targets/manifests/live"
        let name = try #require(
            try FileManager.default.contentsOfDirectory(atPath: dir).first { $0.hasSuffix(".\(build).json.gz") })
        return dir + "/" + name
    }
}
