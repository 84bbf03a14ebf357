import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Redirects a CDN may send: followed on http(s), at most 5, and never from https down to http.
@Suite("Redirects", .tags(.cli))
struct RedirectTests {
    @Test("an http mirror that redirects to another http origin is followed")
    func followed() throws {
        let fixture = try Fixture.published()
        let real = try NginxOrigin(root: fixture.origin)
        let front = try NginxOrigin(root: fixture.origin, redirectTo: real.url)
        let install = try fixture.makeInstall(remotes: [front.url])
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(front.requests().allSatisfy { $0.status == 302 } && !real.requests().isEmpty)
    }

    @Test("an https mirror that redirects to http is refused: nothing is fetched over plain http, exit 69")
    func neverDowngraded() throws {
        let fixture = try Fixture.published()
        let plain = try NginxOrigin(root: fixture.origin)
        let secure = try NginxOrigin(root: fixture.origin, tls: true, redirectTo: plain.url)
        let install = try fixture.makeInstall(remotes: [secure.url]) { $0.caFile = secure.caFile }
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 69, "\(result.stderr)")
        #expect(plain.requests().isEmpty, "\(plain.requests().count) requests over http after an https redirect")
        #expect(result.stderr.contains(secure.url), "\(result.stderr)")
    }

    @Test("a redirect loop ends after 5 redirects with exit 69")
    func loop() throws {
        let fixture = try Fixture.published()
        let looping = try NginxOrigin(root: fixture.origin, redirectTo: "$scheme://$http_host")  // to itself
        let install = try fixture.makeInstall(remotes: [looping.url])
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 69, "\(result.stderr)")
        #expect(result.stderr.contains("redirect"), "\(result.stderr)")
        let requests = looping.requests().count
        #expect(
            requests >= 6 && requests <= 8 * 6,
            "\(requests) requests: 1 + 5 redirects per attempt, a failure streak of 8")
    }
}
