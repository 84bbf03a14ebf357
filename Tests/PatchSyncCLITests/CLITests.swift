import Foundation
import PatchSync
import PatchSyncCLI
import PatchSyncTestSupport
import Testing

extension Tag {
    @Tag static var cli: Self
}

/// Parses the last line of `--json` output.
func lastJSON(_ text: String) throws -> [String: Any] {
    let line = try #require(text.split(separator: "\n").last)
    return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
}

@Suite("The command line", .tags(.cli))
struct CLITests {
    static let verbs: [[String]] = [
        ["keygen"], ["repo", "init"], ["repo", "refresh"], ["repo", "release"], ["publish"], ["init"], ["sync"],
        ["apply"], ["launch"],
        ["rollback"], ["verify"], ["status"], ["bundles"], ["bundles", "list"], ["bundles", "add"],
        ["bundles", "remove"]
    ]

    @Test("every verb has --help with an example", arguments: verbs)
    func help(verb: [String]) throws {
        let result = try CLI.run(verb + ["--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("USAGE: patchsync \(verb.joined(separator: " "))"))
        #expect(result.stdout.contains("Example"))
        #expect(result.stdout.contains("patchsync \(verb.joined(separator: " ")) "))
    }

    @Test("the top-level help lists the verbs and the exit statuses")
    func topHelp() throws {
        let result = try CLI.run(["--help"])
        #expect(result.status == 0)
        for verb in ["keygen", "repo", "publish", "init", "sync", "apply", "launch", "rollback", "verify", "status"] {
            #expect(result.stdout.contains("  \(verb)"))
        }
        #expect(result.stdout.contains("75 deferred"))
    }

    @Test(
        "the exit status table is DESIGN.md's",
        arguments: [
            (PatchSyncError.Code.usage, Int32(64)), (.refusedData, 65), (.originUnavailable, 69), (.localIO, 74),
            (.deferred, 75), (.internal, 1)
        ])
    func exitTable(code: PatchSyncError.Code, status: Int32) {
        #expect(ExitStatus.of(code) == status)
    }

    @Test("bad usage exits 64 with a message that names the problem")
    func usage() throws {
        let unknown = try CLI.run(["sync", "--no-such-flag"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("--no-such-flag"))
        let fixture = try Fixture()
        let notInstall = try CLI.run(["status", "--install", fixture.directory])
        #expect(notInstall.status == 64)
        #expect(notInstall.stderr.contains("error: \(fixture.directory) is not a PatchSync install"))
        #expect(notInstall.stderr.contains("hint: create one with `patchsync init"))
        let badID = try CLI.run([
            "publish", fixture.directory, "--origin", fixture.origin, "--build-id", "../x",
            "--targets-key", fixture.keyDirectory + "/targets.key",
            "--online-key", fixture.keyDirectory + "/online.key"
        ])
        #expect(badID.status == 64)
    }

    @Test("no reachable mirror exits 69 naming the mirror, with a JSON error under --json")
    func originUnavailable() throws {
        let fixture = try Fixture()
        let install = fixture.directory + "/game"
        #expect(
            try CLI.run([
                "init", "--install", install, "--remote", "http://127.0.0.1:1",
                "--root", fixture.rootMetadata
            ]).status == 0)
        let result = try CLI.run(["sync", "--install", install, "--json", "--give-up", "3s"])
        #expect(result.status == 69)
        let error = try lastJSON(result.stdout)
        #expect(error["exitStatus"] as? Int == 69)
        #expect(error["code"] as? String == "originUnavailable")
        #expect((error["error"] as? String)?.contains("http://127.0.0.1:1") == true)
    }

    @Test(
        "a sync while another holds the staging lock and no sync is recorded (housekeeping, a repair) waits for it; held past the wait, it exits 75 (deferred)"
    )
    func deferred() throws {
        let fixture = try Fixture.published()
        let install = fixture.directory + "/game"
        _ = try CLI.run(["init", "--install", install, "--remote", fixture.fileRemote, "--root", fixture.rootMetadata])
        let fd = open(install + "/.patchsync/staging.lock", O_RDWR | O_CREAT, 0o600)
        defer { close(fd) }
        #expect(flock(fd, LOCK_EX) == 0)
        let result = try CLI.run(["sync", "--install", install])
        #expect(result.status == 75)
        #expect(result.stderr.contains("another sync or repair is staging"), "\(result.stderr)")
        // Released while the sync waits: it goes on.
        let waiting = try CLI.start(["sync", "--install", install])
        #expect(!Poll.until(timeout: .seconds(2)) { !waiting.process.isRunning }, "it waits, not exits at once")
        flock(fd, LOCK_UN)
        waiting.process.waitUntilExit()
        #expect(waiting.process.terminationStatus == 0)
    }

    @Test("a local file system error exits 74")
    func localIO() throws {
        let fixture = try Fixture()
        let result = try CLI.run([
            "init", "--install", "/etc/hostname/game", "--remote", fixture.fileRemote,
            "--root", fixture.rootMetadata
        ])
        #expect(result.status == 74)
        #expect(result.stderr.contains("/etc/hostname"))
    }

    @Test("status --json is one object with the install's builds")
    func statusJSON() throws {
        let fixture = try Fixture()
        let install = fixture.directory + "/game"
        _ = try CLI.run(["init", "--install", install, "--remote", fixture.fileRemote, "--root", fixture.rootMetadata])
        let result = try CLI.run(["status", "--install", install, "--json"])
        #expect(result.status == 0)
        let status = try lastJSON(result.stdout)
        #expect(Set(status.keys).subtracting(JSONShapeTests.envelope) == ["install", "channel", "remotes", "builds"])
        #expect(status["channel"] as? String == "live")
    }

    @Test("the publisher verbs: keygen writes 0600 keys, repo init and refresh sign metadata")
    func publisherVerbs() throws {
        let dir = NSTemporaryDirectory() + "patchsync-cli-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        #expect(try CLI.run(["keygen", "--out", dir + "/keys"]).status == 0)
        let mode = try FileManager.default.attributesOfItem(atPath: dir + "/keys/online.key")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try CLI.run(["keygen", "--out", dir + "/keys"]).status == 64, "keys are never overwritten")
        chmod(dir + "/keys/online.key", 0o644)
        let exposed = try CLI.run([
            "repo", "init", "--origin", dir + "/exposed", "--root-key", dir + "/keys/root.key",
            "--targets-key", dir + "/keys/targets.key", "--online-key", dir + "/keys/online.key"
        ])
        #expect(exposed.status == 64)
        #expect(exposed.stderr.contains("chmod 600"))
        chmod(dir + "/keys/online.key", 0o600)
        let initResult = try CLI.run([
            "repo", "init", "--origin", dir + "/origin", "--root-key", dir + "/keys/root.key",
            "--targets-key", dir + "/keys/targets.key", "--online-key", dir + "/keys/online.key", "--json"
        ])
        #expect(initResult.status == 0)
        let refresh = try CLI.run(["repo", "refresh", "--origin", dir + "/origin", "--key", dir + "/keys/online.key"])
        #expect(refresh.status == 0)
        let wrongKey = try CLI.run(["repo", "refresh", "--origin", dir + "/origin", "--key", dir + "/keys/root.key"])
        #expect(wrongKey.status == 64)
        #expect(wrongKey.stderr.contains("is not the timestamp key"))
        #expect(FileManager.default.fileExists(atPath: dir + "/origin/metadata/2.snapshot.json"))
    }
}

@Suite("Publishing with bundles", .tags(.cli))
struct BundleCLITests {
    @Test("--bundles assigns files by glob; a file that matches no bundle is refused with exit 64")
    func bundles() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.003)
        let rules = fixture.directory + "/bundles.json"
        let text =
            #"{"bundles": [{"name": "audio", "required": false, "priority": 5, "paths": ["audio/**"]},"#
            + #"{"name": "base", "required": true, "priority": 0, "paths": ["bin/**", "config/*", "levels/*", "#
            + #""packs/*", "scripts/**", "text/*", "textures/*"]}]}"#
        try Data(text.utf8).write(to: URL(fileURLWithPath: rules))
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let ok = try CLI.run(
            ["publish", build, "--origin", fixture.origin, "--build-id", "1"] + keys + [
                "--bundles", rules, "--json"
            ])
        #expect(ok.status == 0, "\(ok.stderr)")
        let dir = fixture.origin + "/targets/manifests/live"
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: dir).first)
        let manifest = try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name)), what: name)
        #expect(manifest.files.filter { $0.path.hasPrefix("audio/") }.allSatisfy { $0.bundle == "audio" })
        #expect(manifest.files.filter { !$0.path.hasPrefix("audio/") }.allSatisfy { $0.bundle == "base" })
        #expect(manifest.bundles.map(\.name) == ["audio", "base"])

        try Data(#"{"bundles": [{"name": "audio", "required": true, "priority": 0, "paths": ["audio/**"]}]}"#.utf8)
            .write(to: URL(fileURLWithPath: rules))
        let refused = try CLI.run(
            ["publish", build, "--origin", fixture.origin, "--build-id", "2"] + keys + [
                "--bundles", rules
            ])
        #expect(refused.status == 64)
        #expect(refused.stderr.contains("matches no bundle"))
    }
}

@Suite("Launching the game", .tags(.cli))
struct LaunchTests {
    @Test(
        "launch applies a ready build, runs the game with its content root and returns its exit status; apply inside is refused with 75"
    )
    func launch() throws {
        let fixture = try Fixture()
        let dir = fixture.directory + "/tree"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try Data("build 1".utf8).write(to: URL(fileURLWithPath: dir + "/version.txt"))
        try fixture.publish(dir, id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        try Data("build 2".utf8).write(to: URL(fileURLWithPath: dir + "/version.txt"))
        try fixture.publish(dir, id: "2")

        let game = """
            cat "$PATCHSYNC_CONTENT_ROOT/version.txt"; echo; echo "root=$PATCHSYNC_CONTENT_ROOT args=$*"
            "\(CLI.executable)" sync --install "\(install.root)" >/dev/null 2>&1; echo "sync=$?"
            "\(CLI.executable)" apply --install "\(install.root)" 2>/dev/null; echo "apply=$?"
            exit 7
            """
        let result = try CLI.run(["launch", "--install", install.root, "--", "/bin/sh", "-c", game, "game", "--fast"])
        #expect(result.status == 7)
        #expect(result.stdout.contains("build 1"))
        #expect(result.stdout.contains("root=\(install.root)/current args=--fast"))
        #expect(result.stdout.contains("sync=0"), "sync runs beside the game: it never touches the live tree")
        #expect(result.stdout.contains("apply=75"), "apply is refused while the game holds running.lock")
        #expect(
            try CLI.run(["apply", "--install", install.root]).status == 0, "the lock is released when the game exits")
        #expect(try String(contentsOfFile: install.root + "/current/version.txt", encoding: .utf8) == "build 2")
    }

    @Test("verify exits 65 on damage and names the file; verify --repair --now heals it and exits 0")
    func verifyAndRepair() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.005), id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        _ = try CLI.run(["sync", "--install", install.root])
        _ = try CLI.run(["apply", "--install", install.root])
        #expect(try CLI.run(["verify", "--install", install.root]).status == 0)
        try FileManager.default.removeItem(atPath: install.root + "/current/config/default.cfg")
        let damaged = try CLI.run(["verify", "--install", install.root, "--json"])
        #expect(damaged.status == 65)
        let report = try lastJSON(damaged.stdout)
        let first = try #require((report["damaged"] as? [[String: Any]])?.first)
        #expect(first["path"] as? String == "config/default.cfg" && first["problem"] as? String == "missing")
        let repaired = try CLI.run(["verify", "--install", install.root, "--repair", "--now"])
        #expect(repaired.status == 0, "\(repaired.stderr)")
        #expect(repaired.stdout.contains("is now current"))
        #expect(try CLI.run(["verify", "--install", install.root, "--full"]).status == 0)
    }

    @Test("launch without a command is a usage error")
    func noCommand() throws {
        #expect(try CLI.run(["launch"]).status == 64)
    }
}
