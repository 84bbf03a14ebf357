import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("Chosen bundles, playable first", .tags(.cli))
struct BundleChoiceTests {
    /// Bytes on disk under `path`, hard links counted once.
    static func diskBytes(_ path: String) throws -> Int64 {
        let du = try CLI.runProgram("/usr/bin/du", ["-sb", path])
        return Int64(du.stdout.split(separator: "\t").first.map(String.init) ?? "") ?? -1
    }

    /// The published manifest of build `id`.
    static func manifest(_ fixture: Fixture, _ id: String) throws -> Manifest {
        let target = "manifests/live/\(id).json.gz"
        let file = try #require(try Repository.load(origin: fixture.origin).targetFiles[target])
        let hash = try #require(file.hashes["sha256"])
        let path = fixture.origin + "/targets/manifests/live/\(hash).\(id).json.gz"
        return try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: path)), what: path)
    }

    /// The compressed bytes of the distinct chunks of `bundle`'s files that no file of `others` has.
    static func fetchBytes(_ manifest: Manifest, bundle: String) -> Int64 {
        let elsewhere = Set(manifest.files.filter { $0.bundle != bundle }.flatMap { $0.chunks.map(\.sha256) })
        var seen = Set<SHA256Digest>()
        return manifest.files.filter { $0.bundle == bundle }.flatMap(\.chunks)
            .filter { !elsewhere.contains($0.sha256) && seen.insert($0.sha256).inserted }
            .reduce(0) { $0 + Int64($1.objectLength) }
    }

    @Test(
        "required-only install (optional files absent, less disk); adding a bundle fetches only its bytes (nginx's log); removing it frees its space at the next apply; a chosen bundle a new build dropped is reported"
    )
    func chooseAddRemove() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1", bundles: SampleGame.bundles)
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let root = fixture.directory + "/game"
        let created = try CLI.run([
            "init", "--install", root, "--remote", nginx.url, "--root", fixture.rootMetadata, "--required-only"
        ])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(try CLI.run(["sync", "--install", root]).status == 0)
        #expect(try CLI.run(["apply", "--install", root]).status == 0)
        let current = root + "/current/"
        var listing = try treeListing(current)
        let full = try treeListing(build + "/")
        #expect(
            !listing.keys.contains("audio") && !listing.keys.contains("text/fr.po")
                && listing.keys.contains("text/en.po"))
        #expect(
            listing
                == full.filter { !$0.key.hasPrefix("audio") && !($0.key.hasPrefix("text/") && $0.key != "text/en.po") },
            "the required bundles, whole")
        let requiredDisk = try Self.diskBytes(root + "/builds"), buildDisk = try Self.diskBytes(build)
        #expect(requiredDisk < buildDisk, "required-only takes less disk: \(requiredDisk) of \(buildDisk)")
        #expect(try CLI.run(["verify", "--full", "--install", root]).status == 0)
        let listed = try CLI.run(["bundles", "--install", root, "--json"])
        #expect(
            listed.stdout.contains("\"name\":\"hd-audio\"") && listed.stdout.contains("\"state\":\"notSelected\""),
            "\(listed.stdout)")

        let wrong = try CLI.run(["bundles", "add", "hd-audoi", "--install", root])
        #expect(
            wrong.status == 64 && wrong.stderr.contains("no optional bundle hd-audoi")
                && wrong.stderr.contains("hd-audio"), "\(wrong.stderr)")
        let required = try CLI.run(["bundles", "remove", "textures", "--install", root])
        #expect(required.status == 64 && required.stderr.contains("required"), "\(required.stderr)")

        let before = nginx.bytesServed(under: "/objects/")
        #expect(try CLI.run(["bundles", "add", "hd-audio", "--install", root]).status == 0)
        let add = try CLI.run(["sync", "--install", root, "--json"])
        #expect(add.status == 0, "\(add.stderr)")
        let fetched = nginx.bytesServed(under: "/objects/") - before
        let audio = Self.fetchBytes(try Self.manifest(fixture, "1"), bundle: "hd-audio")
        #expect(fetched == audio, "adding hd-audio fetched \(fetched) object bytes, its chunks are \(audio)")
        #expect(try CLI.run(["apply", "--install", root]).status == 0)
        listing = try treeListing(current)
        #expect(
            listing == full.filter { !($0.key.hasPrefix("text/") && $0.key != "text/en.po") }, "audio joined, whole")
        #expect(try CLI.run(["verify", "--full", "--install", root]).status == 0)

        // Changing one's mind before the launcher applied: the ready deployment without audio is dropped.
        #expect(try CLI.run(["bundles", "remove", "hd-audio", "--install", root]).status == 0)
        #expect(try CLI.run(["sync", "--install", root]).status == 0)
        #expect(try Install.open(at: root).status().ready != nil)
        #expect(try CLI.run(["bundles", "add", "hd-audio", "--install", root]).status == 0)
        let back = try CLI.run(["sync", "--install", root, "--json"])
        #expect(try lastJSON(back.stdout)["outcome"] as? String == "upToDate")
        #expect(try Install.open(at: root).status().ready == nil, "nothing stale is left for the launcher to apply")

        let withAudio = try Self.diskBytes(root + "/builds")
        #expect(try CLI.run(["bundles", "remove", "hd-audio", "--install", root]).status == 0)
        let remove = try CLI.run(["sync", "--install", root, "--json"])
        #expect(remove.status == 0)
        #expect(nginx.bytesServed(under: "/objects/") - before == fetched, "removing fetches nothing")
        #expect(FileManager.default.fileExists(atPath: current + "audio"), "live until the next apply")
        #expect(try CLI.run(["apply", "--install", root]).status == 0)
        #expect(!FileManager.default.fileExists(atPath: current + "audio"), "gone after the apply")
        _ = try CLI.run(["status", "--install", root])  // housekeeping runs after the apply
        let without = try Self.diskBytes(root + "/builds")
        #expect(
            withAudio - without >= Self.fetchBytes(try Self.manifest(fixture, "1"), bundle: "hd-audio") / 2,
            "space freed: \(withAudio) -> \(without)")

        // Build 2 renames the optional languages bundle: the player's choice of it is reported, not an error.
        #expect(try CLI.run(["bundles", "add", "languages", "--install", root]).status == 0)
        var renamed = SampleGame.bundles
        renamed[2].name = "translations"
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.01), id: "2", bundles: renamed)
        let dropped = try CLI.run(["sync", "--install", root, "--json"])
        #expect(dropped.status == 0, "\(dropped.stderr)")
        #expect(
            try lastJSON(dropped.stdout)["droppedBundles"] as? [String] == ["languages"],
            "\(dropped.stdout.suffix(600))")
        let status = try CLI.run(["status", "--install", root])
        #expect(status.stdout.contains("not in this build: languages"), "\(status.stdout)")
        // Rollback goes to the build before, not to a deployment of build 2 with other bundles.
        #expect(try CLI.run(["apply", "--install", root]).status == 0)
        #expect(try CLI.run(["rollback", "--install", root]).status == 0)
        #expect(try Install.open(at: root).currentBuild() == "1")
    }

    @Test(
        "an install that takes every optional bundle but one it removed (even before its first sync) also takes a new optional bundle of a later build"
    )
    func allButExcluded() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.005), id: "1", bundles: SampleGame.bundles)
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let removed = try CLI.run(["bundles", "remove", "languages", "--install", install.root])
        #expect(
            removed.status == 0 && removed.stdout.contains("every one but languages"),
            "\(removed.stdout) \(removed.stderr)")
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.liveBundles() == ["base", "textures", "hd-audio"])
        let extras = PatchSync.Bundle(name: "extras", required: false, priority: 3, paths: ["levels/new_*"])
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.005), id: "2", bundles: [extras] + SampleGame.bundles)
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.liveBundles() == ["base", "textures", "hd-audio", "extras"])
        #expect(FileManager.default.fileExists(atPath: install.root + "/current/levels/new_level_0.map"))
        #expect(!FileManager.default.fileExists(atPath: install.root + "/current/text/fr.po"))
    }

    @Test("diff costs a player's selection: per bundle and in the total, an unselected bundle costs nothing")
    func diffSelection() throws {
        let fixture = try Fixture()
        let one = try fixture.sampleBuild(1, scale: 0.01), two = try fixture.sampleBuild(2, scale: 0.01)
        let bundles = fixture.directory + "/bundles.json"
        try SampleGame.writeBundles(to: bundles)
        let all = try lastJSON(try CLI.run(["diff", one, two, "--bundles", bundles, "--json"]).stdout)
        let required = try lastJSON(
            try CLI.run(["diff", one, two, "--bundles", bundles, "--required-only", "--json"]).stdout)
        func written(_ report: [String: Any], _ bundle: String) -> Int? {
            ((report["bundles"] as? [String: Any])?[bundle] as? [String: Any])?["writtenBytes"] as? Int
        }
        func files(_ report: [String: Any]) -> [String: String] {
            Dictionary(
                ((report["files"] as? [[String: Any]]) ?? []).compactMap { f in
                    (f["path"] as? String).map { ($0, f["route"] as? String ?? "") }
                }, uniquingKeysWith: { a, _ in a })
        }
        // Build 2 renames a sound: a player holding it links it (as its sync does), nothing written.
        #expect(files(all)["audio/music/theme.ogg"] == "link" && written(all, "hd-audio") == 0, "\(files(all))")
        #expect(files(required)["audio/music/theme.ogg"] == nil, "an unselected bundle costs nothing")
        #expect(written(required, "hd-audio") == 0 && written(required, "base") == written(all, "base"))
        #expect(required["selection"] as? [String] == ["base", "textures"])
        let added = { (r: [String: Any]) in (r["total"] as? [String: Any])?["filesAdded"] as? Int ?? 0 }
        #expect(added(required) < added(all), "the renamed sound is a file of the selection with hd-audio only")
    }

    func install(_ root: String) throws -> Install { try Install.open(at: root) }

    @Test(
        "playable first: launch swaps in the required part while an optional bundle still downloads; the bundle goes live whole at a later launch, and the game is told which bundles are live"
    )
    func playableFirst() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1", smallFileBytes: 0, bundles: SampleGame.bundles)
        let manifest = try Self.manifest(fixture, "1")
        let audio = try #require(manifest.files.first { $0.bundle == "hd-audio" && !$0.chunks.isEmpty })
        // Every request for one hd-audio object stalls: that bundle cannot complete from this origin.
        let stalled = try FaultOrigin(
            root: fixture.origin, fault: .stall, prefix: "/" + OriginLayout.object(audio.object))
        let root = fixture.directory + "/game"
        #expect(
            try CLI.run([
                "init", "--install", root, "--remote", stalled.url, "--root", fixture.rootMetadata,
                "--bundle", "hd-audio"
            ]).status == 0)
        let sync = try CLI.start(["sync", "--install", root, "--json"])
        var seen = ""
        while !seen.contains("\"event\":\"bundles\"") {
            let data = sync.out.fileHandleForReading.availableData
            if data.isEmpty { break }
            seen += String(decoding: data, as: UTF8.self)
        }
        let event = try #require(seen.split(separator: "\n").first { $0.contains("\"event\":\"bundles\"") })
        #expect(
            event.contains("\"playable\":true") && event.contains("\"name\":\"hd-audio\"")
                && event.contains("\"state\":\"pending\""),
            "the required part is ready first: \(event)")
        let progress =
            try #require(try JSONSerialization.jsonObject(with: Data(event.utf8)) as? [String: Any])["bundles"]
            as? [String: Any]
        let entries = try #require(progress?["bundles"] as? [[String: Any]])
        let pending = try #require(entries.first { $0["name"] as? String == "hd-audio" })
        #expect(
            pending["state"] as? String == "pending"
                && pending["bytes"] as? Int
                    == Int(manifest.files.filter { $0.bundle == "hd-audio" }.reduce(0) { $0 + $1.size }),
            "a launcher learns the pending bundle's size: \(pending)")
        #expect(try install(root).status().bundles?.names(.pending) == ["hd-audio"], "Install.status() says the same")

        let game =
            #"printf 'bundles=%s audio=%s\n' "$PATCHSYNC_BUNDLES" "$(test -e "$PATCHSYNC_CONTENT_ROOT/audio" && echo yes || echo no)""#
        let first = try CLI.run(["launch", "--install", root, "--", "/bin/sh", "-c", game])
        #expect(
            first.status == 0 && first.stdout.contains("bundles=base,textures audio=no"),
            "\(first.stdout) \(first.stderr)")
        #expect(
            try String(contentsOfFile: root + "/live-bundles.json", encoding: .utf8).contains(
                #""bundles":["base","textures"]"#))
        #expect(sync.process.isRunning, "hd-audio is still downloading")
        kill(sync.process.processIdentifier, SIGTERM)
        sync.process.waitUntilExit()

        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let install = try self.install(root)
        var config = try install.config()
        config.remotes = [nginx.url]
        try JSONEncoder().encode(config).write(to: URL(fileURLWithPath: install.configPath))
        let rest = try CLI.run(["sync", "--install", root, "--json"])
        #expect(rest.status == 0, "\(rest.stderr)")
        let requiredObjects = Set(
            manifest.files.filter { $0.bundle != "hd-audio" }.map { "/" + OriginLayout.object($0.object) })
        #expect(
            !nginx.requests().contains { requiredObjects.contains($0.path) }, "the required part is not fetched again")
        let second = try CLI.run(["launch", "--install", root, "--", "/bin/sh", "-c", game])
        #expect(second.stdout.contains("bundles=base,textures,hd-audio audio=yes"), "\(second.stdout)")
        #expect(
            try treeListing(root + "/current/")
                == treeListing(build + "/").filter { !($0.key.hasPrefix("text/") && $0.key != "text/en.po") })
        #expect(try CLI.run(["verify", "--full", "--install", root]).status == 0)
        withExtendedLifetime(stalled) {}
    }
}
