import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("Changing an install's configuration")
struct ConfigUpdateTests {
    @Test(
        "changes made at once (a launcher's setting beside `config set`) are each kept: 8 writers adding 25 peers each leave 200"
    )
    func concurrentChangesAreAllKept() throws {
        let fixture = try Fixture.published()
        let install = try fixture.makeInstall(remotes: ["http://127.0.0.1:1"])
        DispatchQueue.concurrentPerform(iterations: 8) { writer in
            for n in 0..<25 {
                try? install.updateConfig { $0.peers = ($0.peers ?? []) + ["http://10.0.0.\(writer + 1):\(20000 + n)"] }
            }
        }
        let peers = try install.config().peers ?? []
        #expect(peers.count == 200, "\(200 - peers.count) changes lost")
        #expect(Set(peers).count == 200)
    }
}
