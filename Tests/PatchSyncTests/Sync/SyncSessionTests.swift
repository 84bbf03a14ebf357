import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("The Swift API for launchers", .tags(.large))
struct SyncSessionTests {
    @Test("a sync session streams events, can be cancelled mid-transfer keeping progress, and a new one finishes")
    func cancelAndResume() async throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.04)
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin, rateLimit: "200k")
        // A cap that leaves the build minutes to arrive (packs make it one request): under a loaded test pool this
        // consumer may not run for seconds, and the sync must not finish before it cancels.
        let install = try fixture.makeInstall(remotes: [nginx.url]) {
            $0.maxConnections = 2
            $0.maxBytesPerSecond = 10_000
        }
        let session = install.startSync()
        let phases = Task {
            var phases = 0
            for await event in session.events { if case .phase = event { phases += 1 } }
            return phases
        }
        // Polled, not per event: a pack's range is one request, and its events come as it completes.
        #expect(await Poll.stagingAsync(install, chunks: 3, timeout: .seconds(300)), "the session recorded no chunks")
        session.cancel()
        let error = await #expect(throws: PatchSyncError.self) { try await session.result() }
        #expect(error?.code == .deferred)
        #expect(await phases.value >= 2)
        let kept = try #require(try install.status().staging)
        #expect(kept.chunksDone >= 3 && kept.chunksDone < kept.chunksTotal)
        #expect(install.currentDeployment() == nil)
        #expect(try install.status().ready == nil)

        var config = try install.config()
        config.maxBytesPerSecond = nil
        try install.saveConfig(config)
        let finished = try await install.startSync().result()
        #expect(finished.outcome == .ready)
        #expect(
            finished.chunksFetched <= kept.chunksTotal - kept.chunksDone + 2 * 4,
            "only chunks not yet done (and those in flight) are fetched again")
        _ = try install.applyPendingUpdate()
        try EndToEndTests.expectInstalled(install, matches: build)
    }
}
