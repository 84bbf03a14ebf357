import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("Publisher key care", .tags(.cli))
struct KeyRotationTests {
    @Test("repo rotate-root moves clients to new root and online keys; the old online key can no longer publish")
    func rotateRoot() throws {
        let fixture = try Fixture.published(scale: 0.003)
        let nginx = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: [nginx.url])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)

        let newKeys = fixture.directory + "/new-keys"
        #expect(try CLI.run(["keygen", "--out", newKeys]).status == 0)
        let rotated = try CLI.run(["repo", "rotate-root", "--origin", fixture.origin,
                                   "--root-key", fixture.keyDirectory + "/root.key",
                                   "--new-root-key", newKeys + "/root.key", "--new-online-key", newKeys + "/online.key",
                                   "--json"])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        #expect(rotated.stdout.contains("\"rootVersion\":2") || rotated.stdout.contains("\"rootVersion\" : 2"), "\(rotated.stdout)")

        let build2 = try fixture.sampleBuild(2, scale: 0.003)
        let old = try CLI.run(["publish", build2, "--origin", fixture.origin, "--build-id", "2",
                               "--key", fixture.keyDirectory + "/online.key"])
        #expect(old.status == 64 && old.stderr.contains("is not the"), "\(old.stderr)")
        let new = try CLI.run(["publish", build2, "--origin", fixture.origin, "--build-id", "2",
                               "--key", newKeys + "/online.key"])
        #expect(new.status == 0, "\(new.stderr)")

        let sync = try CLI.run(["sync", "--install", install.root])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try install.status().ready == "2")
        let trustedRoot = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath:
            install.root + "/.patchsync/metadata/root.json"))) as? [String: Any]
        #expect((trustedRoot?["signed"] as? [String: Any])?["version"] as? Int == 2)

        // The old root key alone can no longer rotate: it is not a root key of version 2.
        let again = try CLI.run(["repo", "rotate-root", "--origin", fixture.origin,
                                 "--root-key", fixture.keyDirectory + "/root.key", "--new-root-key", newKeys + "/root.key"])
        #expect(again.status == 64 && again.stderr.contains("not a root key"), "\(again.stderr)")
    }

    @Test("a private key readable by others is refused with a chmod hint")
    func keyPermissions() throws {
        let fixture = try Fixture()
        let key = fixture.keyDirectory + "/online.key"
        #expect(chmod(key, 0o644) == 0)
        let result = try CLI.run(["repo", "refresh", "--origin", fixture.origin, "--key", key])
        #expect(result.status == 64 && result.stderr.contains("chmod 600"), "\(result.stderr)")
    }
}

@Suite("Publisher cron example", .tags(.cli))
struct PublisherCronTests {
    @Test("Examples/publisher-cron/refresh-metadata.sh re-signs timestamp and snapshot, and runs the upload")
    func cronScript() throws {
        let fixture = try Fixture.published()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path + "/Examples/publisher-cron/refresh-metadata.sh"
        let version = { () throws -> Int in
            let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath:
                fixture.origin + "/metadata/timestamp.json"))) as? [String: Any]
            return ((json?["signed"] as? [String: Any])?["version"] as? Int) ?? -1
        }
        let before = try version()
        let marker = fixture.directory + "/uploaded"
        let result = try CLI.runProgram("/usr/bin/env", [
            "ORIGIN=\(fixture.origin)", "ONLINE_KEY=\(fixture.keyDirectory)/online.key", "PATCHSYNC=\(CLI.executable)",
            "UPLOAD=touch \(marker)", "bash", script])
        #expect(result.status == 0, "\(result.stdout)")
        #expect(try version() == before + 1)
        #expect(FileManager.default.fileExists(atPath: marker))
        let missing = try CLI.runProgram("/usr/bin/env", ["ORIGIN=\(fixture.origin)", "bash", script])
        #expect(missing.status != 0 && missing.stdout.contains("ONLINE_KEY"))
    }
}
