import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Issue 7, part 1: a failing request is retried on the same mirror with backoff, then the next
/// mirror is asked; a mirror's 404 for vouched-for content moves on at once. (Each fault served once,
/// flipped bytes among them, is in TransferFaultTests.)
@Suite("Mirror retries", .tags(.cli))
struct MirrorRetryTests {
    @Test("503 bursts: each object is retried on the same mirror and the sync completes; without retries it fails (69)")
    func serviceUnavailableBursts() throws {
        let fixture = try Fixture.published()
        let origin = try FaultOrigin(root: fixture.origin, fault: .unavailable, count: 1)
        let once = try fixture.makeInstall("once", remotes: [origin.url]) { $0.attemptsPerMirror = 1 }
        let failed = try CLI.run(["sync", "--install", once.root])
        #expect(failed.status == 69 && failed.stderr.contains("503"), "\(failed.stderr)")

        let install = try fixture.makeInstall(remotes: [origin.url])
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(try install.status().ready == "1")
        #expect(origin.objectRequests(status: 503) > 0 && origin.objectRequests(status: 206) > 0)
    }

    @Test("a mirror that answers 404 for objects is asked once per request, then the next mirror serves them")
    func notFoundMovesOn() throws {
        let fixture = try Fixture.published()
        let missing = try FaultOrigin(root: fixture.origin, fault: .missing)
        let good = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: [missing.url, good.url])
        let result = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        let objectRequests = good.requests().filter { $0.path.hasPrefix("/objects/") }.count
        #expect(missing.objectRequests(status: 404) == objectRequests, "404 is not retried on the same mirror")
    }

    @Test("when every mirror fails, exit 69 names each mirror and its last error")
    func allMirrorsFail() throws {
        let fixture = try Fixture.published()
        let first = try FaultOrigin(root: fixture.origin, fault: .unavailable)
        let second = try FaultOrigin(root: fixture.origin, fault: .missing)
        let install = try fixture.makeInstall(remotes: [first.url, second.url]) { $0.attemptsPerMirror = 2 }
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 69, "\(result.stderr)")
        #expect(result.stderr.contains(first.url + ": HTTP status 503") && result.stderr.contains(second.url + ": not found"),
                "\(result.stderr)")
    }
}
