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
        let rotated = try CLI.run([
            "repo", "rotate-root", "--origin", fixture.origin,
            "--root-key", fixture.keyDirectory + "/root.key",
            "--new-root-key", newKeys + "/root.key", "--new-online-key", newKeys + "/online.key",
            "--json"
        ])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        #expect(
            rotated.stdout.contains("\"rootVersion\":2") || rotated.stdout.contains("\"rootVersion\" : 2"),
            "\(rotated.stdout)")

        let build2 = try fixture.sampleBuild(2, scale: 0.003)
        let targets = ["--targets-key", fixture.keyDirectory + "/targets.key"]
        let old = try CLI.run(
            [
                "publish", build2, "--origin", fixture.origin, "--build-id", "2",
                "--online-key", fixture.keyDirectory + "/online.key"
            ] + targets)
        #expect(old.status == 64 && old.stderr.contains("is not the"), "\(old.stderr)")
        let new = try CLI.run(
            [
                "publish", build2, "--origin", fixture.origin, "--build-id", "2",
                "--online-key", newKeys + "/online.key"
            ] + targets)
        #expect(new.status == 0, "\(new.stderr)")

        let sync = try CLI.run(["sync", "--install", install.root])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try install.status().ready == "2")
        let trustedRoot =
            try JSONSerialization.jsonObject(
                with: Data(
                    contentsOf: URL(
                        fileURLWithPath:
                            install.root + "/.patchsync/metadata/root.json"))) as? [String: Any]
        #expect((trustedRoot?["signed"] as? [String: Any])?["version"] as? Int == 2)

        // The old root key alone can no longer rotate: it is not a root key of version 2.
        let again = try CLI.run([
            "repo", "rotate-root", "--origin", fixture.origin,
            "--root-key", fixture.keyDirectory + "/root.key", "--new-online-key", fixture.keyDirectory + "/online.key"
        ])
        #expect(again.status == 64 && again.stderr.contains("not a root key"), "\(again.stderr)")
    }

    /// Rotates the root of `fixture`'s origin with `rotating` (new keys generated into `newKeys`), then
    /// puts the metadata back as it was the moment the new root was written, as a rotation killed there
    /// leaves it; returns the files it took away.
    static func stopAfterTheRoot(_ fixture: Fixture, rotating: [String], newKeys: String) throws -> [String: Data] {
        let metadata = fixture.origin + "/metadata"
        let before = try FileManager.default.contentsOfDirectory(atPath: metadata)
        let stamp = try Data(contentsOf: URL(fileURLWithPath: metadata + "/timestamp.json"))
        #expect(try CLI.run(["keygen", "--out", newKeys]).status == 0)
        let rotated = try CLI.run(
            ["repo", "rotate-root", "--origin", fixture.origin, "--root-key", fixture.keyDirectory + "/root.key"]
                + rotating)
        #expect(rotated.status == 0, "\(rotated.stderr)")
        var removed: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: metadata)
        where !before.contains(name) && !name.hasSuffix(".root.json") {
            removed[name] = try Data(contentsOf: URL(fileURLWithPath: metadata + "/" + name))
            try FileManager.default.removeItem(atPath: metadata + "/" + name)
        }
        try stamp.write(to: URL(fileURLWithPath: metadata + "/timestamp.json"))
        return removed
    }

    @Test(
        "a rotation of the targets keys that stopped after writing the new root: status and check name it and the command that finishes it, and the next publish with the new key signs targets again"
    )
    func targetsRotationStoppedAfterTheRoot() throws {
        let fixture = try Fixture.published(scale: 0.003)
        let newKeys = fixture.directory + "/new-keys"
        _ = try Self.stopAfterTheRoot(
            fixture,
            rotating: [
                "--new-targets-key", newKeys + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
            ],
            newKeys: newKeys)
        let status = try CLI.run(["repo", "status", "--origin", fixture.origin])
        #expect(status.status == 0 && status.stderr.contains("targets keys that root version 2"), "\(status.stderr)")
        let check = try CLI.run(["repo", "check", "--origin", fixture.origin])
        #expect(check.status == 65 && check.stderr.contains("repo renew"), "\(check.stderr)")
        let publish = try CLI.run([
            "publish", try fixture.sampleBuild(2, scale: 0.003), "--origin", fixture.origin, "--build-id", "2",
            "--targets-key", newKeys + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ])
        #expect(publish.status == 0, "\(publish.stderr)")
        let after = try CLI.run(["repo", "check", "--origin", fixture.origin])
        #expect(after.status == 0, "\(after.stderr)")
    }

    @Test(
        "a rotation of the online key that stopped after writing the new root (killed, or its commit to a bucket lost the race) leaves a repository the commands still open: status names the stop and the refresh that finishes it, refresh with the new key signs snapshot and timestamp again, and a player that took the new root updates"
    )
    func rotationStoppedAfterTheRoot() throws {
        let fixture = try Fixture.published(scale: 0.003)
        let nginx = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: [nginx.url])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        let metadata = fixture.origin + "/metadata"
        let newKeys = fixture.directory + "/new-keys"
        let removed = try Self.stopAfterTheRoot(
            fixture, rotating: ["--new-online-key", newKeys + "/online.key"], newKeys: newKeys)
        // A player probes the new root and takes it; the old timestamp is no longer good to it.
        #expect(try CLI.run(["sync", "--install", install.root]).status != 0)
        let status = try CLI.run(["repo", "status", "--origin", fixture.origin])
        #expect(
            status.status == 0 && status.stderr.contains("rotation stopped half way")
                && status.stderr.contains("repo refresh"), "\(status.stderr)")
        let check = try CLI.run(["repo", "check", "--origin", fixture.origin])
        #expect(check.status == 65 && check.stderr.contains("repo refresh"), "\(check.stderr)")
        // Nothing else signs on top of the old key's snapshot until the refresh.
        let publish = try CLI.run(
            [
                "publish", try fixture.sampleBuild(2, scale: 0.003), "--origin", fixture.origin, "--build-id", "2",
                "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", newKeys + "/online.key"
            ])
        #expect(publish.status == 65 && publish.stderr.contains("rotation stopped half way"), "\(publish.stderr)")
        // The old key counts only for the state the rotation stopped in: beside a newer snapshot, it is refused.
        let newer = try #require(removed.keys.first { $0.hasSuffix(".snapshot.json") })
        try removed[newer]?.write(to: URL(fileURLWithPath: metadata + "/" + newer))
        let refused = try CLI.run(["repo", "status", "--origin", fixture.origin])
        #expect(refused.status == 65 && refused.stderr.contains("not the newest snapshot"), "\(refused.stderr)")
        try FileManager.default.removeItem(atPath: metadata + "/" + newer)
        let refresh = try CLI.run([
            "repo", "refresh", "--origin", fixture.origin, "--online-key", newKeys + "/online.key"
        ])
        #expect(refresh.status == 0, "\(refresh.stderr)")
        let again = try CLI.run(["repo", "status", "--origin", fixture.origin])
        #expect(again.status == 0 && !again.stderr.contains("rotation stopped"), "\(again.stderr)")
        let sync = try CLI.run(["sync", "--install", install.root])
        #expect(sync.status == 0, "\(sync.stderr)")
    }

    @Test(
        "each role signs only its own part: the online key cannot publish, the targets key cannot refresh, one key cannot hold two roles"
    )
    func roleSeparation() throws {
        let fixture = try Fixture.published(scale: 0.003)
        let keys = fixture.keyDirectory, build2 = try fixture.sampleBuild(2, scale: 0.003)
        let onlineAsTargets = try CLI.run([
            "publish", build2, "--origin", fixture.origin, "--build-id", "2",
            "--targets-key", keys + "/online.key", "--online-key", keys + "/online.key"
        ])
        #expect(
            onlineAsTargets.status == 64 && onlineAsTargets.stderr.contains("is not a targets key"),
            "\(onlineAsTargets.stderr)")
        let noTargets = try CLI.run([
            "publish", build2, "--origin", fixture.origin, "--build-id", "2",
            "--online-key", keys + "/online.key"
        ])
        #expect(noTargets.status == 64 && noTargets.stderr.contains("--targets-key"), "\(noTargets.stderr)")
        let targetsRefresh = try CLI.run([
            "repo", "refresh", "--origin", fixture.origin, "--online-key", keys + "/targets.key"
        ])
        #expect(
            targetsRefresh.status == 64 && targetsRefresh.stderr.contains("is not the timestamp key"),
            "\(targetsRefresh.stderr)")
        #expect(
            try CLI.run(["repo", "refresh", "--origin", fixture.origin, "--online-key", keys + "/online.key"]).status
                == 0)
        let shared = try CLI.run([
            "repo", "init", "--origin", fixture.directory + "/shared", "--root-key", keys + "/root.key",
            "--targets-key", keys + "/online.key", "--online-key", keys + "/online.key"
        ])
        #expect(
            shared.status == 64 && shared.stderr.contains("as a targets key and as an online key"), "\(shared.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fixture.directory + "/shared/metadata/root.json"))
    }

    @Test("thresholds: two of three root keys rotate, both targets keys publish, one is refused; a client follows")
    func thresholds() throws {
        let dir = NSTemporaryDirectory() + "patchsync-thresholds-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(try CLI.run(["keygen", "--out", dir + "/a"]).status == 0)
        #expect(try CLI.run(["keygen", "--out", dir + "/b", "--role", "root", "--role", "targets"]).status == 0)
        #expect(try CLI.run(["keygen", "--out", dir + "/c", "--role", "root"]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: dir + "/c/online.key"), "--role writes only that key")
        let origin = dir + "/origin"
        let created = try CLI.run([
            "repo", "init", "--origin", origin, "--root-key", dir + "/a/root.key", "--root-key", dir + "/b/root.key",
            "--root-key", dir + "/c/root.key", "--root-threshold", "2",
            "--targets-key", dir + "/a/targets.key", "--targets-key", dir + "/b/targets.key",
            "--online-key", dir + "/a/online.key"
        ])
        #expect(created.status == 0, "\(created.stderr)")
        let root = try JSONSerialization.jsonObject(
            with: Data(contentsOf: URL(fileURLWithPath: origin + "/metadata/root.json")))
        let roles = ((root as? [String: Any])?["signed"] as? [String: Any])?["roles"] as? [String: [String: Any]]
        #expect(roles?["root"]?["threshold"] as? Int == 2 && (roles?["root"]?["keyids"] as? [String])?.count == 3)
        #expect(roles?["targets"]?["threshold"] as? Int == 2, "the default threshold is every key given")

        try SampleGame(seed: 3, scale: 0.002).write(build: 1, into: dir + "/build")
        let publish = { (targets: [String]) throws -> CLI.Result in
            try CLI.run(
                [
                    "publish", dir + "/build", "--origin", origin, "--build-id", "1", "--online-key",
                    dir + "/a/online.key"
                ]
                    + targets.flatMap { ["--targets-key", dir + "/\($0)/targets.key"] })
        }
        let one = try publish(["a"])
        #expect(one.status == 64 && one.stderr.contains("needs 2 signatures"), "\(one.stderr)")
        let both = try publish(["a", "b"])
        #expect(both.status == 0, "\(both.stderr)")

        let alone = try CLI.run(["repo", "renew", "--origin", origin, "--root-key", dir + "/c/root.key"])
        #expect(alone.status == 64 && alone.stderr.contains("needs 2 signatures"), "\(alone.stderr)")
        let renewed = try CLI.run([
            "repo", "renew", "--origin", origin, "--root-key", dir + "/a/root.key",
            "--root-key", dir + "/c/root.key"
        ])
        #expect(renewed.status == 0, "\(renewed.stderr)")
        #expect(FileManager.default.fileExists(atPath: origin + "/metadata/2.root.json"))

        let install = dir + "/game"
        #expect(
            try CLI.run([
                "init", "--install", install, "--remote", "file://" + origin,
                "--root", origin + "/metadata/1.root.json"
            ]).status == 0)
        let sync = try CLI.run(["sync", "--install", install])
        #expect(sync.status == 0, "\(sync.stderr)")
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
        let script =
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path + "/Examples/publisher-cron/refresh-metadata.sh"
        let version = { () throws -> Int in
            let json =
                try JSONSerialization.jsonObject(
                    with: Data(
                        contentsOf: URL(
                            fileURLWithPath:
                                fixture.origin + "/metadata/timestamp.json"))) as? [String: Any]
            return ((json?["signed"] as? [String: Any])?["version"] as? Int) ?? -1
        }
        let before = try version()
        let marker = fixture.directory + "/uploaded"
        let result = try CLI.runProgram(
            "/usr/bin/env",
            [
                "ORIGIN=\(fixture.origin)", "ONLINE_KEY=\(fixture.keyDirectory)/online.key",
                "PATCHSYNC=\(CLI.executable)",
                "UPLOAD=touch \(marker)", "bash", script
            ])
        #expect(result.status == 0, "\(result.stdout)")
        #expect(try version() == before + 1)
        #expect(FileManager.default.fileExists(atPath: marker))
        let missing = try CLI.runProgram("/usr/bin/env", ["ORIGIN=\(fixture.origin)", "bash", script])
        #expect(missing.status != 0 && missing.stdout.contains("ONLINE_KEY"))
    }
}
