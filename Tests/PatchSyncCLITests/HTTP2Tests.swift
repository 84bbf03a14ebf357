import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Issue 7, part 4: over TLS, nginx offers HTTP/2 and every request shares one multiplexed
/// connection instead of opening one per concurrent request.
@Suite("HTTP/2", .tags(.cli))
struct HTTP2Tests {
    @Test(
        "a sync from nginx with TLS and http2 runs over HTTP/2, its concurrent requests multiplexed on one connection")
    func multiplexed() throws {
        let fixture = try Fixture.published(packs: false)
        let origin = try NginxOrigin(root: fixture.origin, tls: true)
        let install = try fixture.makeInstall(remotes: [origin.url]) {
            $0.caFile = origin.caFile
            $0.maxConnections = 6
        }
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 0, "\(result.stderr)")
        let objects = origin.requests().filter { $0.path.hasPrefix("/objects/") }
        #expect(objects.count > 100, "\(objects.count) object requests")
        #expect(objects.allSatisfy { $0.httpProtocol == "HTTP/2.0" }, "\(Set(objects.map(\.httpProtocol)))")
        let connections = Set(origin.requests().map(\.connection))
        #expect(connections.count <= 2, "\(connections.count) connections for \(origin.requests().count) requests")
    }

    @Test("an https origin whose CA the install does not trust is refused (TLS verification is always on), exit 69")
    func untrustedCertificate() throws {
        let fixture = try Fixture.published(packs: false)
        let origin = try NginxOrigin(root: fixture.origin, tls: true)
        let install = try fixture.makeInstall(remotes: [origin.url])
        let result = try CLI.run(["sync", "--install", install.root])
        #expect(result.status == 69 && result.stderr.contains("certificate"), "\(result.stderr)")
        #expect(origin.requests().isEmpty)
    }
}
