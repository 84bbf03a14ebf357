import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Issue 7, part 5: `--max-rate` is one budget for every connection together.
@Suite("Bandwidth cap", .tags(.cli))
struct BandwidthCapTests {
    @Test("sync --max-rate 512K over six connections stays at or below 512 KiB/s in total")
    func sharedCap() throws {
        let fixture = try Fixture.published(scale: 0.05)
        let origin = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: [origin.url]) { $0.maxConnections = 6 }
        let started = Date()
        let result = try CLI.run(["sync", "--install", install.root, "--max-rate", "512K", "--json"])
        let elapsed = Date().timeIntervalSince(started)
        #expect(result.status == 0, "\(result.stderr)")
        let received = try #require(try lastJSON(result.stdout)["bytesReceived"] as? Int)
        #expect(received > 1 << 20, "the build is big enough to measure: \(received) bytes")
        // The bucket starts full (a twentieth of a second), so allow that burst on top of the rate.
        let rate = Double(received - 26 * 1024) / elapsed
        #expect(rate <= 512 * 1024 * 1.1, "\(Int(rate)) B/s with a 512 KiB/s cap over \(elapsed) s")
    }

    @Test("--max-rate refuses what is not a rate, saying what to give")
    func badRate() throws {
        let result = try CLI.run(["sync", "--install", "/nonexistent", "--max-rate", "fast"])
        #expect(result.status == 64 && result.stderr.contains("500K"), "\(result.stderr)")
    }
}
