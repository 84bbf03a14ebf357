import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// A release day in small: build 1 live, build 2 with spoilers published ahead with --release-at.
struct ReleaseDay {
    let fixture: Fixture
    let nginx: NginxOrigin
    let build2: String
    let root: String
    var keys: String { fixture.keyDirectory }
    /// Build 2's new file names and a sample of its new plaintext, which the origin must not reveal.
    static let spoilerName = "final-boss-reveal.txt"
    static let spoilerText = "THE-FINAL-BOSS-IS-AUNT-MARGE-7f3a"

    /// Publishes build 1 (the sample's bundles) and installs it from nginx; writes build 2 with a
    /// spoiler folder: a text file (stored deflated) and random bytes (stored raw). `rate` slows nginx.
    init(scale: Double = 0.02, rate: String? = nil, secretBytes: Int = 300_000) throws {
        fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: scale), id: "1", bundles: SampleGame.bundles)
        build2 = try fixture.sampleBuild(2, scale: scale)
        try FileManager.default.createDirectory(atPath: build2 + "/spoilers", withIntermediateDirectories: true)
        let text = (0..<400).map { "line \($0): \(Self.spoilerText) wins the war\n" }.joined()
        try Data(text.utf8).write(to: URL(fileURLWithPath: build2 + "/spoilers/" + Self.spoilerName))
        var random = SystemRandomNumberGenerator()
        try Data((0..<secretBytes).map { _ in UInt8.random(in: 0...255, using: &random) })
            .write(to: URL(fileURLWithPath: build2 + "/spoilers/secret-map.bin"))
        try SampleGame.writeBundles(to: fixture.directory + "/bundles.json")
        nginx = try NginxOrigin(root: fixture.origin, rateLimit: rate)
        root = fixture.directory + "/game"
        let created = try CLI.run(["init", "--install", root, "--remote", nginx.url, "--root", fixture.rootMetadata])
        #expect(created.status == 0, "\(created.stderr)")
        #expect(try CLI.run(["sync", "--install", root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", root]).status == 0)
    }

    /// `patchsync publish` of build 2 (or the folder `build`) into `origin` (the fixture's by default),
    /// with `extra` arguments.
    func publish2(_ extra: [String], origin: String? = nil, id: String = "2", build: String? = nil) throws -> CLI.Result
    {
        try CLI.run(
            [
                "publish", build ?? build2, "--origin", origin ?? fixture.origin, "--build-id", id, "--bundles",
                fixture.directory + "/bundles.json", "--targets-key", keys + "/targets.key",
                "--online-key", keys + "/online.key"
            ] + extra)
    }

    /// The spoilers (names and plaintext samples) found anywhere in `origin`: in each file as it is,
    /// gunzip'd, and in every zlib stream it holds.
    func spoilersFound(in origin: String) throws -> String {
        let map = try Data(contentsOf: URL(fileURLWithPath: build2 + "/spoilers/secret-map.bin"))
        let sample = map.subdata(in: 150_000..<150_064).map { String(format: "%02x", $0) }.joined()
        let scan = try CLI.runProgram(
            "/usr/bin/python3",
            [
                "-c",
                """
                import ctypes, gzip, os, sys, zlib
                origin, needles = sys.argv[1], [sys.argv[2].encode(), sys.argv[3].encode(), bytes.fromhex(sys.argv[4])]
                found = set()
                zstd = ctypes.CDLL("libzstd.so.1")
                zstd.ZSTD_findFrameCompressedSize.restype = ctypes.c_size_t
                zstd.ZSTD_decompress.restype = ctypes.c_size_t
                zstd.ZSTD_isError.argtypes = [ctypes.c_size_t]
                def unzstd(frame):
                    size = zstd.ZSTD_findFrameCompressedSize(frame, len(frame))
                    if zstd.ZSTD_isError(size): return b""
                    out = ctypes.create_string_buffer(8 << 20)
                    n = zstd.ZSTD_decompress(out, len(out), frame[:size], size)
                    return b"" if zstd.ZSTD_isError(n) else out.raw[:n]
                def look(blob):
                    for n in needles:
                        if n in blob: found.add(needles.index(n))
                for folder, _, names in os.walk(origin):
                    for name in names:
                        data = open(os.path.join(folder, name), "rb").read()
                        look(data)
                        if data[:2] == b"\\x1f\\x8b":
                            try: look(gzip.decompress(data))
                            except Exception: pass
                        i = data.find(b"\\x78")
                        while i != -1:
                            if i + 1 < len(data) and ((0x78 << 8) | data[i + 1]) % 31 == 0:
                                try: look(zlib.decompressobj().decompress(data[i:], 8 << 20))
                                except Exception: pass
                            i = data.find(b"\\x78", i + 1)
                        i = data.find(b"\\x28\\xb5\\x2f\\xfd")
                        while i != -1:
                            look(unzstd(data[i:]))
                            i = data.find(b"\\x28\\xb5\\x2f\\xfd", i + 1)
                print(" ".join(str(i) for i in sorted(found)))
                """, origin, Self.spoilerName, Self.spoilerText, sample
            ])
        #expect(scan.status == 0, "\(scan.stderr)")
        return scan.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

@Suite("Preload: download before the release, play the second it unlocks", .tags(.cli), .serialized)
struct PreloadTests {
    static func releaseAt(_ seconds: TimeInterval) -> String {
        TUFDate.format(Date(timeIntervalSinceNow: seconds))
    }

    @Test(
        "publish → preload → apply refused, launch plays the current build → repo release → sync unlocks with one small request (≤ 64 KiB, no object) → apply: the install equals build 2; the origin reveals no new file name or plaintext before the release (a normal publish does, by the same scan)"
    )
    func releaseDay() throws {
        let day = try ReleaseDay()
        defer { day.nginx.stop() }
        let published = try day.publish2(["--release-at", Self.releaseAt(86400), "--json"])
        #expect(published.status == 0, "\(published.stderr)")
        let keyFile = day.keys + "/content/live/2.key"
        var st = stat()
        #expect(stat(keyFile, &st) == 0 && st.st_mode & 0o077 == 0, "the content key is in the key folder, private")
        #expect(
            try day.spoilersFound(in: day.fixture.origin) == "", "the origin reveals nothing of build 2's new content")
        let control = try Fixture()
        _ = try Repository.create(
            origin: control.directory + "/plain", rootKey: day.fixture.rootKey,
            targetsKey: day.fixture.targetsKey, onlineKey: day.fixture.onlineKey)
        #expect(try day.publish2([], origin: control.directory + "/plain").status == 0)
        #expect(
            try day.spoilersFound(in: control.directory + "/plain") == "0 1 2",
            "the same scan finds the name, the text and the random sample in a normal publish")

        let before = day.nginx.bytesServed(), objectsBeforePreload = day.nginx.bytesServed(under: "/objects/")
        let sync = try CLI.run(["sync", "--install", day.root, "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try lastJSON(sync.stdout)["outcome"] as? String == "preloaded", "\(sync.stdout)")
        // Publish's estimate for players on build 1 is what they fetch ahead: the sealed manifest and the ranges.
        let estimate = (try lastJSON(published.stdout)["preload"] as? [String: Any])?["routes"] as? [String: Any]
        #expect(
            (estimate?["1"] as? Int).map(Int64.init) == day.nginx.bytesServed(under: "/objects/")
                - objectsBeforePreload,
            "estimated \(String(describing: estimate)); fetched \(day.nginx.bytesServed(under: "/objects/") - objectsBeforePreload)"
        )
        #expect(sync.stdout.contains("\"event\":\"preload\"") && sync.stdout.contains("unlocks"), "\(sync.stdout)")
        let preloaded = day.nginx.bytesServed() - before
        let events = day.fixture.directory + "/preload-events.jsonl"
        try sync.stdout.split(separator: "\n").dropLast().joined(separator: "\n").write(
            toFile: events, atomically: true, encoding: .utf8)
        let planTarget = try #require(
            try Repository.load(origin: day.fixture.origin).targetFiles["manifests/live/2.json.gz"])
        let planFile = day.fixture.origin + "/targets/manifests/live/\(planTarget.hashes["sha256"] ?? "").2.json.gz"
        let (valid, output) = try python(
            """
            import gzip, json, sys, jsonschema
            events = [json.loads(l) for l in open(sys.argv[2])]
            for e in events: jsonschema.validate(e, json.load(open(sys.argv[1] + "/events.schema.json")))
            assert [e for e in events if e["event"] == "preload"][-1]["preload"]["bytesDone"] > 0
            jsonschema.validate(json.loads(gzip.open(sys.argv[3]).read()), json.load(open(sys.argv[1] + "/preload-plan.schema.json")))
            print("valid")
            """, [DiffCLITests.repoRoot + "/manifests", events, planFile])
        #expect(valid == 0 && output.contains("valid"), "the events and the plan follow their schemas: \(output)")
        let status = try CLI.run(["status", "--install", day.root])
        #expect(
            status.stdout.contains("preload:  preloaded") && status.stdout.contains("of build 2, unlocks"),
            "\(status.stdout)")
        let api = try #require(try Install.open(at: day.root).status().preload)
        #expect(api.bytesDone == api.bytes && api.bytes > 0 && !api.released)

        let apply = try CLI.run(["apply", "--install", day.root])
        #expect(
            apply.status == 75 && apply.stderr.contains("preloaded") && apply.stderr.contains("before its release"),
            "\(apply.status) \(apply.stderr)")
        let launch = try CLI.run(["launch", "--install", day.root, "--", "/bin/sh", "-c", "test ! -e spoilers"])
        #expect(launch.status == 0, "the game runs on build 1: \(launch.stderr)")
        #expect(try Install.open(at: day.root).currentDeployment()?.hasPrefix("1") == true)
        #expect(try treeListing(day.root + "/current/") == (try treeListing(day.fixture.directory + "/build-1/")))

        let release = try CLI.run([
            "repo", "release", "2", "--origin", day.fixture.origin, "--online-key", day.keys + "/online.key"
        ])
        #expect(release.status == 0, "\(release.stderr)")
        let again = try CLI.run([
            "repo", "release", "2", "--origin", day.fixture.origin, "--online-key", day.keys + "/online.key"
        ])
        #expect(again.status == 0 && again.stdout.contains("already released"), "\(again.stdout)")
        let objectsBefore = day.nginx.bytesServed(under: "/objects/"), allBefore = day.nginx.bytesServed()
        let unlock = try CLI.run(["sync", "--install", day.root, "--json"])
        #expect(unlock.status == 0, "\(unlock.stderr)")
        #expect(try lastJSON(unlock.stdout)["outcome"] as? String == "ready", "\(unlock.stdout)")
        let afterRelease = day.nginx.bytesServed() - allBefore
        #expect(
            day.nginx.bytesServed(under: "/objects/") == objectsBefore,
            "nothing of the build is fetched after the release")
        #expect(afterRelease <= 64 << 10, "after the release: \(afterRelease) bytes (metadata and the key)")
        // Where the bytes came from: the preload store, not the origin (it sent none of the build now).
        let unlocked = try lastJSON(unlock.stdout)
        #expect(
            unlocked["bytesFromOrigin"] as? Int == 0 && (unlocked["bytesFromPreload"] as? Int ?? 0) > 0, "\(unlocked)")
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(
            try treeListing(day.root + "/current/") == (try treeListing(day.build2 + "/")), "the install is build 2")
        #expect(try CLI.run(["verify", "--full", "--install", day.root]).status == 0)
        #expect(try Install.open(at: day.root).status().preload == nil)
        let settled = try CLI.run(["sync", "--install", day.root, "--json"])
        #expect(try lastJSON(settled.stdout)["outcome"] as? String == "upToDate", "\(settled.stdout)")
        #expect(preloaded > 0)
    }

    @Test(
        "refused with exit 65, nothing changed: a release time in the past at publish; apply while this clock is past the release time that signed metadata has not released (faketime); the cron job's refresh releases on time without the targets key"
    )
    func clockAndCron() throws {
        let day = try ReleaseDay(scale: 0.005)
        defer { day.nginx.stop() }
        let targetsBefore = try Repository.load(origin: day.fixture.origin).targetsVersion
        let past = try day.publish2(["--release-at", "2020-01-01T00:00:00Z"])
        #expect(past.status == 65 && past.stderr.contains("has passed"), "\(past.status) \(past.stderr)")
        #expect(try Repository.load(origin: day.fixture.origin).targetsVersion == targetsBefore, "nothing was signed")
        let bad = try day.publish2(["--release-at", "tomorrow"])
        #expect(bad.status == 64 && bad.stderr.contains("2026-12-01T17:00:00Z"), "\(bad.stderr)")

        #expect(try day.publish2(["--release-at", Self.releaseAt(3600)]).status == 0)
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        let ahead = try runLater(days: 2, ["apply", "--install", day.root])
        #expect(
            ahead.status == 65 && ahead.stderr.contains("signed metadata has not released it")
                && ahead.stderr.contains("not this clock"), "\(ahead.status) \(ahead.stderr)")
        #expect(
            try Install.open(at: day.root).currentDeployment()?.hasPrefix("1") == true, "the live tree is untouched")
        let aheadSync = try runLater(days: 2, ["sync", "--install", day.root, "--json"])
        #expect(aheadSync.status == 0 && aheadSync.stdout.contains("\"outcome\":\"preloaded\""), "\(aheadSync.stdout)")

        // The cron job, two hours later, with only the online key (and the key folder's content/).
        let early = try CLI.run([
            "repo", "refresh", "--origin", day.fixture.origin, "--online-key", day.keys + "/online.key", "--json"
        ])
        #expect(early.status == 0 && early.stdout.contains("\"released\":[]"), "\(early.stdout)")
        let due = try CLI.runProgram(
            "/usr/bin/faketime",
            [
                "-f", "+2h", CLI.executable, "repo", "refresh", "--origin",
                day.fixture.origin, "--online-key", day.keys + "/online.key", "--json"
            ])
        #expect(
            due.status == 0
                && (due.stdout.contains("\"released\":[\"live\\/2\"]")
                    || due.stdout.contains("\"released\":[\"live/2\"]")),
            "\(due.stdout) \(due.stderr)")
        #expect(try CLI.run(["sync", "--install", day.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(try treeListing(day.root + "/current/") == (try treeListing(day.build2 + "/")))
    }

    @Test(
        "pending preloads never count toward prune's --keep nor are unlisted by it: with build 1 and preloads 2 and 3, --keep 1 keeps all three"
    )
    func prunePendingPreloads() throws {
        let day = try ReleaseDay(scale: 0.005)
        defer { day.nginx.stop() }
        #expect(try day.publish2(["--release-at", Self.releaseAt(86400)]).status == 0)
        let build3 = try day.fixture.sampleBuild(3, scale: 0.005)
        #expect(try day.publish2(["--release-at", Self.releaseAt(2 * 86400)], id: "3", build: build3).status == 0)
        let keys = ["--targets-key", day.keys + "/targets.key", "--online-key", day.keys + "/online.key"]
        let prune = try CLI.run(["repo", "prune", "--origin", day.fixture.origin, "--keep", "1", "--grace", "0"] + keys)
        #expect(prune.status == 0, "\(prune.stderr)")
        let listed = Set(
            try Repository.load(origin: day.fixture.origin).targetFiles.values.compactMap { $0.custom?.buildId })
        #expect(listed == ["1", "2", "3"], "prune unlisted \(Set(["1", "2", "3"]).subtracting(listed))")
    }

    @Test(
        "releasing the older of two preloads keeps the newer one's ranges: the sync that stages the older deletes none of them and fetches none again"
    )
    func olderReleasedKeepsNewer() throws {
        let day = try ReleaseDay(scale: 0.005)
        defer { day.nginx.stop() }
        #expect(try day.publish2(["--release-at", Self.releaseAt(86400)]).status == 0)
        let build3 = try day.fixture.sampleBuild(3, scale: 0.005)
        #expect(try day.publish2(["--release-at", Self.releaseAt(2 * 86400)], id: "3", build: build3).status == 0)
        let first = try CLI.run(["sync", "--install", day.root, "--json"])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try lastJSON(first.stdout)["outcome"] as? String == "preloaded", "\(first.stdout)")
        let newer = try #require(try Install.open(at: day.root).status().preload)
        #expect(newer.buildId == "3" && newer.bytesDone == newer.bytes && newer.bytes > 0)
        let held = try Self.preloadFiles(day.root)

        let release = try CLI.run([
            "repo", "release", "2", "--origin", day.fixture.origin, "--online-key", day.keys + "/online.key"
        ])
        #expect(release.status == 0, "\(release.stderr)")
        let second = try CLI.run(["sync", "--install", day.root, "--json"])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(try lastJSON(second.stdout)["outcome"] as? String == "ready", "build 2 is staged: \(second.stdout)")
        let now = try Self.preloadFiles(day.root)
        let lost = held.filter { now[$0.key] != $0.value }.keys.sorted()
        #expect(lost.isEmpty, "build 3's files were deleted (and fetched again): \(lost)")
        let still = try #require(try Install.open(at: day.root).status().preload)
        #expect(still.buildId == "3" && still.bytesDone == still.bytes && !still.released)
        #expect(try CLI.run(["apply", "--install", day.root]).status == 0)
        #expect(
            try treeListing(day.root + "/current/") == (try treeListing(day.build2 + "/")), "the install is build 2")
    }

    /// The files of an install's preload store, each with its inode and modification time: one deleted
    /// and fetched again differs.
    static func preloadFiles(_ root: String) throws -> [String: String] {
        let folder = root + "/.patchsync/preload"
        var files: [String: String] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: folder) {
            var st = stat()
            guard stat(folder + "/" + name, &st) == 0 else { continue }
            files[name] = "\(st.st_ino) \(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
        }
        return files
    }

    @Test("a discretionary preload stopped by SIGTERM resumes at the next run without fetching again what it kept")
    func discretionaryAcrossRestarts() throws {
        let day = try ReleaseDay(scale: 0.02, rate: "1m", secretBytes: 5_000_000)
        defer { day.nginx.stop() }
        #expect(try day.publish2(["--release-at", Self.releaseAt(86400)]).status == 0)
        let before = day.nginx.bytesServed(under: "/objects/")
        let sync = try CLI.start(["sync", "--install", day.root, "--discretionary", "--quiet"])
        /// Bytes in the preload folder: complete ranges and parts.
        func held() -> Int64 {
            let folder = day.root + "/.patchsync/preload"
            return ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter {
                !$0.hasPrefix("plan.")
            }
            .reduce(0) {
                $0 + ((try? FileManager.default.attributesOfItem(atPath: folder + "/" + $1)[.size] as? Int64) ?? 0)
            }
        }
        Poll.until(timeout: .seconds(120)) { !sync.process.isRunning || held() >= 1_000_000 }
        kill(sync.process.processIdentifier, SIGTERM)
        sync.process.waitUntilExit()
        #expect(sync.process.terminationStatus == 75)
        let partial = try #require(try Install.open(at: day.root).status().preload)
        let kept = held()
        #expect(kept >= 1_000_000 && kept < partial.bytes, "stopped part way: \(kept) of \(partial.bytes)")
        let resumed = try CLI.run(["sync", "--install", day.root, "--discretionary", "--json"])
        #expect(
            resumed.status == 0 && resumed.stdout.contains("\"outcome\":\"preloaded\""),
            "\(resumed.stdout) \(resumed.stderr)")
        let total = try #require(try Install.open(at: day.root).status().preload)
        #expect(total.bytesDone == total.bytes)
        let received = try #require(try lastJSON(resumed.stdout)["bytesReceived"] as? Int)
        #expect(
            Int64(received) <= total.bytes - kept + (64 << 10),
            "the resumed run received \(received) bytes; \(kept) of \(total.bytes) were kept from the first")
        #expect(day.nginx.bytesServed(under: "/objects/") - before >= total.bytes)
        #expect(total.bytes > 4_000_000)
    }
}
