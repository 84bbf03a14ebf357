import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// TUF's slow-retrieval attack: a mirror that stalls or trickles must be cut off, retried or
/// left for the next mirror, and a whole metadata refresh has a deadline.
@Suite("Slow retrieval", .tags(.cli))
struct SlowRetrievalTests {
    private func sync(_ install: Install, _ extra: [String] = []) throws -> (CLI.Result, TimeInterval) {
        let start = Date()
        let result = try CLI.run(["sync", "--install", install.root] + extra)
        return (result, Date().timeIntervalSince(start))
    }

    @Test(
        "a mirror that sends headers and then nothing is cut off after lowSpeedSeconds and retried until the failure streak is spent; exit 69"
    )
    func stall() throws {
        let fixture = try Fixture.published()
        let slow = try SlowOrigin(.stall)
        let install = try fixture.makeInstall(remotes: [slow.url]) {
            $0.lowSpeedSeconds = 2
            $0.failureStreak = 3
        }
        let (result, elapsed) = try sync(install)
        #expect(result.status == 69, "\(result.stderr)")
        #expect(elapsed < 15, "took \(elapsed) s")
        #expect(slow.requests == 3, "cut off and retried twice (a failure streak of 3): \(slow.requests) requests")
        #expect(result.stderr.contains("Timeout") || result.stderr.contains("too slow"), "\(result.stderr)")
        #expect(try install.status().ready == nil)
    }

    @Test("a mirror that trickles below lowSpeedBytesPerSecond is cut off")
    func trickle() throws {
        let fixture = try Fixture.published()
        let slow = try SlowOrigin(.trickle(bytesPerSecond: 100))
        let install = try fixture.makeInstall(remotes: [slow.url]) {
            $0.lowSpeedSeconds = 2
            $0.failureStreak = 3
        }
        let (result, _) = try sync(install)
        #expect(result.status == 69, "\(result.stderr)")
        // Each request is cut off (the stall test bounds the time it takes): a failure streak of 3.
        #expect(slow.requests == 3, "cut off and retried twice: \(slow.requests) requests")
        #expect(result.stderr.contains("Timeout") || result.stderr.contains("too slow"), "\(result.stderr)")
    }

    @Test(
        "a mirror fast enough for the low-speed limit but endless is stopped by the refresh deadline (in a sync, never before its --give-up)"
    )
    func deadline() throws {
        let fixture = try Fixture.published()
        let slow = try SlowOrigin(.trickle(bytesPerSecond: 4000))
        let install = try fixture.makeInstall(remotes: [slow.url]) {
            $0.lowSpeedSeconds = 2
            $0.refreshDeadlineSeconds = 4
        }
        let (result, elapsed) = try sync(install, ["--give-up", "3s"])
        #expect(result.status == 69, "\(result.stderr)")
        #expect(result.stderr.contains("deadline"), "\(result.stderr)")
        #expect(elapsed >= 3.5 && elapsed < 25, "took \(elapsed) s (the deadline: --give-up 3s and 10 s more)")
    }

    @Test("with a stalling first mirror, sync completes from the second")
    func failover() throws {
        let fixture = try Fixture.published()
        let slow = try SlowOrigin(.stall)
        let nginx = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: [slow.url, nginx.url]) { $0.lowSpeedSeconds = 2 }
        let (result, _) = try sync(install)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try install.status().ready == "1")
        #expect(
            slow.requests >= 1 && slow.requests <= 3,
            "the stalled mirror is cooled down, not asked per request: \(slow.requests)")
    }
}
