import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@testable import PatchSyncCLI

@Suite("Progress for people and launchers", .tags(.cli))
struct ProgressTests {
    @Test("the rate is smoothed and the ETA is never absurd")
    func estimator() {
        var steady = RateEstimator()
        for second in 0...10 { steady.add(seconds: Double(second), done: Int64(second) * 1_000_000) }
        #expect(abs(steady.bytesPerSecond - 1_000_000) < 1)
        #expect(steady.eta(remaining: 5_000_000) == 5)

        var spiky = steady
        spiky.add(seconds: 11, done: 10_000_000 + 11_000_000)  // one second at 11 MB/s
        #expect(
            spiky.bytesPerSecond > 1_000_000 && spiky.bytesPerSecond < 5_000_000,
            "one burst moves the rate only part way")

        var stalled = RateEstimator()
        stalled.add(seconds: 0, done: 0)
        stalled.add(seconds: 100, done: 100)  // 1 B/s
        #expect(stalled.eta(remaining: 1 << 30) == nil, "no ETA of years when the rate is near zero")

        var slow = RateEstimator()
        slow.add(seconds: 0, done: 0)
        slow.add(seconds: 1, done: 2048)
        #expect(slow.eta(remaining: Int64(2048) * 8 * 86400) == nil, "no ETA beyond a week")
        #expect(slow.eta(remaining: 2048 * 60) == 60)

        // Ten seconds of comparing between two steps download nothing: the next step is measured from its
        // own first event, and the rate of the step before stands until then.
        var steps = RateEstimator()
        for second in 0...5 { steps.add(seconds: Double(second), done: Int64(second) * 1_000_000) }
        steps.restart()
        steps.add(seconds: 15, done: 5_000_000)
        #expect(abs(steps.bytesPerSecond - 1_000_000) < 1, "the gap is no download time: \(steps.bytesPerSecond)")
        steps.add(seconds: 16, done: 6_000_000)
        #expect(abs(steps.bytesPerSecond - 1_000_000) < 1, "\(steps.bytesPerSecond)")
    }

    @Test("mirror failures are logged through swift-log when PATCHSYNC_LOG asks, and are quiet by default")
    func mirrorFailuresLogged() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
        let remotes = ["file:///nonexistent-mirror", fixture.fileRemote]
        let quietInstall = try fixture.makeInstall("quiet", remotes: remotes)
        let quiet = try CLI.run(["sync", "--install", quietInstall.root, "--quiet"])
        #expect(quiet.status == 0)
        #expect(!quiet.stderr.contains("nonexistent-mirror"))
        let install = try fixture.makeInstall("logged", remotes: remotes)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.executable)
        process.arguments = ["sync", "--install", install.root, "--quiet"]
        process.environment = ["PATCHSYNC_LOG": "notice"]
        let err = Pipe()
        process.standardError = err
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(stderr.contains("on file:///nonexistent-mirror failed"), "\(stderr)")
    }

    @Test(
        "sync --json prints one event per line that validates against manifests/events.schema.json, then the result; --quiet prints no progress"
    )
    func jsonEvents() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.01), id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let result = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(result.status == 0)
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count >= 3)
        let events = fixture.directory + "/events.jsonl"
        try lines.dropLast().joined(separator: "\n").write(toFile: events, atomically: true, encoding: .utf8)
        let (status, output) = try python(
            """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1]))
            events = [json.loads(l) for l in open(sys.argv[2])]
            for e in events: jsonschema.validate(e, schema)
            transfers = [e for e in events if e["event"] == "transfer"]
            assert transfers[-1]["bytesDone"] == transfers[-1]["bytesTotal"]
            assert transfers[-1]["filesDone"] == transfers[-1]["filesTotal"] > 0, transfers[-1]
            assert events[-1]["event"] == "bundles" and events[-1]["bundles"]["playable"], events[-1]
            """, [DiffCLITests.repoRoot + "/manifests/events.schema.json", events])
        #expect(status == 0, "\(output)")
        #expect((try lastJSON(result.stdout))["outcome"] as? String == "ready")

        let publish = try CLI.run([
            "publish", try fixture.sampleBuild(2, scale: 0.01), "--origin", fixture.origin,
            "--build-id", "2", "--targets-key", fixture.keyDirectory + "/targets.key",
            "--online-key", fixture.keyDirectory + "/online.key", "--json"
        ])
        #expect(publish.status == 0, "\(publish.stderr)")
        let publishEvents = fixture.directory + "/publish-events.jsonl"
        try publish.stdout.split(separator: "\n").dropLast().joined(separator: "\n")
            .write(toFile: publishEvents, atomically: true, encoding: .utf8)
        let (publishStatus, publishOutput) = try python(
            """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1]))
            events = [json.loads(l) for l in open(sys.argv[2])]
            for e in events: jsonschema.validate(e, schema)
            assert events and events[-1]["event"] == "publish" and events[-1]["filesDone"] == events[-1]["filesTotal"] > 0
            """, [DiffCLITests.repoRoot + "/manifests/events.schema.json", publishEvents])
        #expect(publishStatus == 0, "\(publishOutput)")

        let quiet = try CLI.run(["sync", "--install", install.root, "--quiet"])
        #expect(quiet.status == 0)
        #expect(quiet.stderr.isEmpty)
        #expect(quiet.stdout.contains("is staged and ready"))
    }
}
