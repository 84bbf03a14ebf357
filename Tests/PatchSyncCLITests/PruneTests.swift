import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("Pruning an origin", .tags(.cli))
struct PruneTests {
    /// Every regular file under the origin (relative paths), but the lock file.
    static func files(_ origin: String) throws -> Set<String> {
        Set(
            try FileManager.default.subpathsOfDirectory(atPath: origin).filter {
                var isDirectory: ObjCBool = false
                return FileManager.default.fileExists(atPath: origin + "/" + $0, isDirectory: &isDirectory)
                    && !isDirectory.boolValue
                    && !$0.hasPrefix(".")
            })
    }

    /// What build `target` needs in the origin: its manifest, its files' objects, its delta packs and manifest deltas.
    static func needs(_ origin: String, _ target: String, _ file: TargetFile) throws -> Set<String> {
        let hash = try #require(file.hashes["sha256"])
        let slash = try #require(target.lastIndex(of: "/"))
        var paths: Set<String> = ["targets/\(target[...slash])\(hash).\(target[target.index(after: slash)...])"]
        let data = try Data(contentsOf: URL(fileURLWithPath: origin + "/" + paths.first!))
        let manifest = try Manifest.decode(data, what: target)
        paths.formUnion(manifest.files.filter { !$0.chunks.isEmpty }.map { OriginLayout.object($0.object) })
        paths.formUnion((manifest.deltas ?? []).map { OriginLayout.object($0.object) })
        paths.formUnion((file.custom?.manifestDeltas ?? []).map { "objects/\($0.object.prefix(2))/\($0.object).bin" })
        return paths
    }

    /// Runs `patchsync ARGS…` eight days from now (libfaketime), with the files' times left as they are;
    /// `stdout` keeps only its JSON line (warnings, on stderr, go to `stderr`).
    static func weekLater(_ arguments: [String]) throws -> CLI.Result {
        ShiftedClock.removeStaleSemaphores()
        var result = try CLI.runProgram(
            "/usr/bin/env", ["NO_FAKE_STAT=1", "/usr/bin/faketime", "-f", "+8d", CLI.executable] + arguments)
        let lines = result.stdout.split(separator: "\n")
        result.stderr = lines.filter { !$0.hasPrefix("{") }.joined(separator: "\n")
        result.stdout = lines.filter { $0.hasPrefix("{") }.joined(separator: "\n")
        return result
    }

    /// A build with a large file of its own (an object no other build shares): build 1 plus that file.
    static func zerothBuild(_ fixture: Fixture) throws -> String {
        let one = try fixture.sampleBuild(1, scale: 0.003), zero = fixture.directory + "/build-0"
        try FileManager.default.copyItem(atPath: one, toPath: zero)
        try Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: ($0 &* 2654435761) >> 13) })
            .write(to: URL(fileURLWithPath: zero + "/only-in-0.bin"))
        return zero
    }

    /// A third build: build 2 with one file changed and one added.
    static func thirdBuild(_ fixture: Fixture) throws -> String {
        let two = try fixture.sampleBuild(2, scale: 0.003), three = fixture.directory + "/build-3"
        try FileManager.default.copyItem(atPath: two, toPath: three)
        try Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7919 >> 3) }).write(
            to: URL(fileURLWithPath: three + "/added-in-3.bin"))
        return three
    }

    @Test(
        "repo prune unlists builds beyond --keep but keeps every byte a client of the last --grace could ask for; once the grace has passed it frees what no listed build needs, and players still install and verify the kept builds"
    )
    func keepsWhatClientsNeed() throws {
        let fixture = try Fixture()
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let prune = ["repo", "prune", "--origin", fixture.origin, "--json"]
        try fixture.publish(try Self.zerothBuild(fixture), id: "0")
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.003), id: "2")
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "b1", channel: "beta")
        try fixture.publish(try Self.thirdBuild(fixture), id: "3")
        let before = try Repository.load(origin: fixture.origin).targetFiles
        var neededBefore = Set<String>()
        for (path, file) in before { neededBefore.formUnion(try Self.needs(fixture.origin, path, file)) }

        let refused = try CLI.run(prune + ["--keep", "1"])
        #expect(
            refused.status == 64 && refused.stdout.contains("--targets-key"),
            "unlisting needs the targets key: \(refused.stdout)")

        // Within the grace period: builds 0, 1 and 2 are unlisted, and nothing any of the five needs goes.
        let first = try CLI.run(prune + ["--keep", "1", "--grace", "7d"] + keys)
        #expect(first.status == 0, "\(first.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(first.stdout.utf8)) as? [String: Any])
        #expect(report["unlisted"] as? [String] == ["live/0", "live/1", "live/2"], "\(first.stdout.prefix(400))")
        #expect(report["held"] as? [String] == ["live/0", "live/1", "live/2"])
        let listed = try Repository.load(origin: fixture.origin).targetFiles
        #expect(Set(listed.keys) == ["manifests/live/3.json.gz", "manifests/beta/b1.json.gz"])
        let present = try Self.files(fixture.origin)
        #expect(neededBefore.isSubset(of: present), "missing: \(neededBefore.subtracting(present).sorted().prefix(5))")

        // A week and a day later: the dry run says what would go and removes nothing.
        let dry = try Self.weekLater(prune + ["--keep", "1", "--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(try Self.files(fixture.origin) == present, "a dry run removes nothing")
        let sizes = Dictionary(
            uniqueKeysWithValues: present.map { path in
                (
                    path,
                    (try? FileManager.default.attributesOfItem(atPath: fixture.origin + "/" + path))?[.size] as? Int
                        ?? -1
                )
            })
        let gone = try Self.weekLater(prune + ["--keep", "1"])
        #expect(gone.status == 0, "\(gone.stderr)")
        // (Each line says when it was written: the times differ.)
        let untimed = { (text: String) in
            text.replacingOccurrences(of: #""time":"[^"]*""#, with: "", options: .regularExpression)
        }
        #expect(
            untimed(gone.stdout)
                == untimed(dry.stdout.replacingOccurrences(of: "\"dryRun\":true", with: "\"dryRun\":false")),
            "the dry run reported exactly what the prune did")
        let after = try Self.files(fixture.origin)
        var neededAfter = Set<String>()
        for (path, file) in listed { neededAfter.formUnion(try Self.needs(fixture.origin, path, file)) }
        #expect(
            neededAfter.isSubset(of: after), "a listed build lost \(neededAfter.subtracting(after).sorted().prefix(5))")
        let removedObjects = present.subtracting(after).filter { $0.hasPrefix("objects/") }
        #expect(!removedObjects.isEmpty && removedObjects.isDisjoint(with: neededAfter))
        #expect(
            !after.contains { $0.hasPrefix("targets/manifests/live/") && !$0.hasSuffix(".3.json.gz") },
            "the manifests of builds 0, 1 and 2 are gone")
        let metadata = after.filter { $0.hasPrefix("metadata/") }
        let repo = try Repository.load(origin: fixture.origin)
        #expect(
            metadata == [
                "metadata/root.json", "metadata/1.root.json", "metadata/timestamp.json",
                "metadata/\(repo.snapshotVersion).snapshot.json", "metadata/\(repo.targetsVersion).targets.json"
            ],
            "old snapshot and targets versions are gone, root versions stay: \(metadata.sorted())")
        let result = try #require(try JSONSerialization.jsonObject(with: Data(gone.stdout.utf8)) as? [String: Any])
        let freed = result["bytesFreed"] as? Int
        let removed = (result["removed"] as? [[String: Any]] ?? []).compactMap { $0["bytes"] as? Int }
        // Exactly the bytes of the files that went: old manifests, manifest deltas, objects, metadata versions.
        let vanished = present.subtracting(after).reduce(0) { $0 + (sizes[$1] ?? 0) }
        #expect(freed == vanished && freed == removed.reduce(0, +) && vanished > 0, "\(gone.stdout.prefix(300))")

        // A fresh player installs build 3 from the pruned origin; python-tuf's view is checked elsewhere.
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let sync = try CLI.run(["sync", "--install", install.root])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.currentBuild() == "3")
        let verify = try CLI.run(["verify", "--install", install.root, "--full"])
        #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        let again = try Self.weekLater(prune + ["--keep", "1"])
        #expect(
            again.status == 0 && again.stdout.contains("\"bytesFreed\":0"),
            "a second prune has nothing left to do: \(again.stdout.prefix(300))")
    }

    @Test(
        "regression: a dry run of a prune that unlists builds says what the run frees (it kept them as if still listed: 920 KiB said, 100 MiB freed), with no grace and within one; the output explains the grace"
    )
    func dryRunOfUnlisting() throws {
        for grace in ["0", "7d"] {
            let fixture = try Fixture()
            let keys = [
                "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key",
                fixture.keyDirectory + "/online.key"
            ]
            try fixture.publish(try Self.zerothBuild(fixture), id: "0")
            try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
            try fixture.publish(try Self.thirdBuild(fixture), id: "3")
            let prune = ["repo", "prune", "--origin", fixture.origin, "--keep", "1", "--grace", grace]
            let present = try Self.files(fixture.origin)
            let dry = try CLI.run(prune + ["--dry-run", "--json"])
            #expect(dry.status == 0, "\(dry.stderr)")
            #expect(try Self.files(fixture.origin) == present, "a dry run removes nothing")
            let human = try CLI.run(prune + ["--dry-run"])
            let real = try CLI.run(prune + ["--json"] + keys)
            #expect(real.status == 0, "\(real.stderr)")
            func report(_ text: String) throws -> [String: Any] {
                let line = try #require(text.split(separator: "\n").last { $0.hasPrefix("{") })
                return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            }
            let said = try report(dry.stdout), did = try report(real.stdout)
            let removed = { (r: [String: Any]) in
                ((r["removed"] as? [[String: Any]]) ?? []).compactMap { $0["path"] as? String }
            }
            #expect(removed(said) == removed(did), "--grace \(grace): the dry run named the files the run removed")
            #expect(
                said["bytesFreed"] as? Int == did["bytesFreed"] as? Int
                    && said["held"] as? [String] == did["held"] as? [String])
            #expect(said["listed"] as? [String] == ["live/3"] && said["unlisted"] as? [String] == ["live/0", "live/1"])
            if grace == "0" {
                #expect(
                    removed(did).contains { $0.hasPrefix("objects/") },
                    "with no grace build 0's own content goes: \(removed(did))")
            } else {
                #expect(did["held"] as? [String] == ["live/0", "live/1"])
                #expect(
                    human.stdout.contains("held for the grace period: live/0, live/1")
                        && human.stdout.contains("in the last 7d"), "\(human.stdout)")
            }
        }
    }

    @Test(
        "a publish, refresh or prune waits its turn: while one holds the origin's lock the others exit 75 and write nothing; with --wait they take their turn when it ends, or exit 75 at the deadline"
    )
    func originLock() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.002), id: "1")
        let files = try Self.files(fixture.origin)
        var lock: OriginLock? = try OriginLock(origin: fixture.origin, purpose: "this test")
        let refresh = try CLI.run([
            "repo", "refresh", "--origin", fixture.origin, "--online-key", fixture.keyDirectory + "/online.key"
        ])
        #expect(refresh.status == 75 && refresh.stderr.contains("is locked"), "\(refresh.stderr)")
        let prune = try CLI.run(["repo", "prune", "--origin", fixture.origin, "--keep", "1", "--grace", "0"])
        #expect(prune.status == 75, "\(prune.stderr)")
        #expect(throws: PatchSyncError.self) { try fixture.publish(try fixture.sampleBuild(2, scale: 0.002), id: "2") }
        #expect(try Self.files(fixture.origin) == files, "nothing was written")
        let waited = try CLI.run([
            "repo", "refresh", "--wait", "1s", "--origin", fixture.origin, "--online-key",
            fixture.keyDirectory + "/online.key"
        ])
        #expect(
            waited.status == 75 && waited.stderr.contains("waited 1 s"),
            "--wait gives up at its deadline: \(waited.stderr)")
        // With --wait, the command takes its turn once the holder finishes.
        let queued = try CLI.start([
            "repo", "refresh", "--wait", "60s", "--origin", fixture.origin, "--online-key",
            fixture.keyDirectory + "/online.key"
        ])
        Thread.sleep(forTimeInterval: 1)
        #expect(queued.process.isRunning, "it waits for the lock")
        #expect(lock != nil)
        lock = nil
        queued.process.waitUntilExit()
        #expect(queued.process.terminationStatus == 0)
        #expect(
            try CLI.run([
                "repo", "refresh", "--origin", fixture.origin, "--online-key", fixture.keyDirectory + "/online.key"
            ]).status == 0)
    }

    @Test(
        "the grace runs from when a targets version stopped being current (its successor's write), not from its own write: versions ten days old, succeeded now, keep build 0's manifest and objects under --grace 7d; with --grace 0s they go"
    )
    func graceFromSuccessor() throws {
        let fixture = try Fixture()
        try fixture.publish(try Self.zerothBuild(fixture), id: "0")
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
        let repo = try Repository.load(origin: fixture.origin)
        let zero = try #require(repo.targetFiles.first { $0.value.custom?.buildId == "0" })
        let needed = try Self.needs(fixture.origin, zero.key, zero.value)
        // Everything the origin holds was written ten days ago; the prune writes the next targets version now.
        let old = Date(timeIntervalSinceNow: -10 * 86400)
        for path in try FileManager.default.subpathsOfDirectory(atPath: fixture.origin) {
            try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: fixture.origin + "/" + path)
        }
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let prune = try CLI.run(
            ["repo", "prune", "--origin", fixture.origin, "--keep", "1", "--grace", "7d", "--json"] + keys)
        #expect(prune.status == 0, "\(prune.stderr)")
        let lost = needed.subtracting(try Self.files(fixture.origin))
        #expect(lost.isEmpty, "a client that read targets until now may still fetch build 0: \(lost.sorted())")
        #expect(try lastJSON(prune.stdout)["held"] as? [String] == ["live/0"], "\(prune.stdout)")

        let none = try CLI.run(["repo", "prune", "--origin", fixture.origin, "--keep", "1", "--grace", "0s"] + keys)
        #expect(none.status == 0, "\(none.stderr)")
        let only0 = needed.filter { $0.hasPrefix("targets/") || $0.contains("objects/") }
        #expect(!only0.subtracting(try Self.files(fixture.origin)).isEmpty, "with no grace, build 0's own files go")
    }

    @Test(
        "regression: a prune stopped after deleting a manifest that an older targets version lists is finished by a prune with a longer grace (it read that manifest and failed with 74)"
    )
    func longerGraceAfterStoppedPrune() throws {
        let fixture = try Fixture()
        try fixture.publish(try Self.zerothBuild(fixture), id: "0")
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let repo = try Repository.load(origin: fixture.origin)
        let zero = try #require(repo.targetFiles.first { $0.value.custom?.buildId == "0" })
        let manifest = try #require(
            try Self.needs(fixture.origin, zero.key, zero.value).first { $0.hasPrefix("targets/") })
        #expect(
            try CLI.run(["repo", "prune", "--origin", fixture.origin, "--keep", "1", "--grace", "7d"] + keys).status
                == 0)
        // What a prune with no grace, stopped half way, leaves: build 0's manifest gone, older metadata still there.
        try FileManager.default.removeItem(atPath: fixture.origin + "/" + manifest)
        let longer = try CLI.run(["repo", "prune", "--origin", fixture.origin, "--keep", "1", "--grace", "30d"] + keys)
        #expect(longer.status == 0, "\(longer.stderr)")
    }
}
