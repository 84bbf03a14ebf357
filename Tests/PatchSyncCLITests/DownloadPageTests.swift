import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// What a launcher's download page reads from `sync --json`: progress that moves with the bytes at a
/// true rate, and a stall told as a stall, ending the sync when the launcher asks.
@Suite("A launcher's download page", .tags(.cli), .serialized)
struct DownloadPageTests {
    /// A build of `megabytes` MiB of incompressible files, published, served by nginx.
    static func world(megabytes: Int, configure: (inout InstallConfig) -> Void = { _ in }) throws -> (
        Fixture, NginxOrigin, Install
    ) {
        let fixture = try Fixture()
        let build = fixture.directory + "/big"
        try FileManager.default.createDirectory(atPath: build, withIntermediateDirectories: true)
        var random = SeededRandom(seed: 77)
        for index in 0..<megabytes {
            try Data((0..<(1 << 20)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
                .write(to: URL(fileURLWithPath: build + "/part\(index).bin"))
        }
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        return (fixture, nginx, try fixture.makeInstall(remotes: [nginx.url], configure: configure))
    }

    /// Each line `patchsync ARGS…` prints on stdout, with when it came (seconds from the start); `during`
    /// runs on each line as it comes.
    /// runs on each line as it comes; the process is killed (SIGKILL) at the first line `kill` holds for.
    static func lines(
        _ arguments: [String], during: (String, Double) -> Void = { _, _ in }, kill: (String) -> Bool = { _ in false }
    ) throws -> (lines: [(String, Double)], status: Int32) {
        let started = ContinuousClock.now
        let process = try CLI.start(arguments)
        var lines: [(String, Double)] = []
        var pending = Data()
        let handle = process.out.fileHandleForReading
        while true {
            let data = handle.availableData
            if data.isEmpty { break }
            pending.append(data)
            while let newline = pending.firstIndex(of: 0x0a) {
                let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                pending.removeSubrange(pending.startIndex...newline)
                let at = (ContinuousClock.now - started) / .seconds(1)
                lines.append((line, at))
                during(line, at)
                if process.process.isRunning, kill(line) { Foundation.kill(process.process.processIdentifier, SIGKILL) }
            }
        }
        process.process.waitUntilExit()
        return (lines, process.process.terminationStatus)
    }

    static func event(_ line: String) -> [String: Any]? {
        try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    }

    @Test(
        "on a 1 MiB/s capped sync, transfer events come at least every half second (one second of slack on a loaded machine) while bytes arrive, bytesDone never goes back, and the rate is within 20% of the cap"
    )
    func progressMovesWithBytes() throws {
        let (fixture, nginx, install) = try Self.world(megabytes: 6)
        defer {
            nginx.stop()
            withExtendedLifetime(fixture) {}
        }
        let run = try Self.lines(["sync", "--install", install.root, "--max-rate", "1M", "--json"])
        #expect(run.status == 0, "\(run.lines.suffix(3).map(\.0))")
        let transfers = run.lines.compactMap { line, at in
            Self.event(line).flatMap { $0["event"] as? String == "transfer" ? ($0, at) : nil }
        }
        #expect(transfers.count >= 8, "a 6 s transfer reports as it goes: \(transfers.count) events")
        // Between the first and the one before the last (the last waits for the final fsync).
        let moving = Array(transfers.dropLast())
        let gaps = zip(moving.dropFirst(), moving).map { $0.1 - $1.1 }
        #expect((gaps.max() ?? 0) <= 1.0, "the longest gap between transfer events: \(gaps.max() ?? 0) s")
        let done = transfers.compactMap { $0.0["bytesDone"] as? Int }
        #expect(done == done.sorted(), "bytesDone never goes back")
        // The rate once the transfer has settled (after its first two seconds, before its last event).
        let settled = transfers.filter { $0.1 - transfers[0].1 >= 2 }.dropLast().compactMap {
            $0.0["bytesPerSecond"] as? Int
        }
        try #require(!settled.isEmpty, "rates once settled")
        let median = settled.sorted()[settled.count / 2]
        #expect(
            abs(Double(median) - 1_048_576) <= 0.2 * 1_048_576,
            "median rate \(median) B/s under a 1 MiB/s cap: \(settled)")
    }

    @Test(
        "an origin that freezes mid-transfer (SIGSTOP) gives a `stalled` event within 15 s of its last byte and exit 69 at --give-up, with the verified chunks kept, though libcurl cuts each silent request off after 6 s and the retries wait their backoff (the quiet goes on through them); the next sync finishes"
    )
    func stallAndGiveUp() throws {
        // Requests cut off for low speed long before the give-up: each retry must not start the quiet again.
        let (fixture, nginx, install) = try Self.world(megabytes: 8) { $0.lowSpeedSeconds = 6 }
        defer {
            nginx.thaw()  // a stopped nginx never takes its SIGTERM
            nginx.stop()
            withExtendedLifetime(fixture) {}
        }
        var frozenAt: Double?
        var stalledAt: Double?
        var lastTransfer: Double?
        let run = try Self.lines(["sync", "--install", install.root, "--max-rate", "1M", "--give-up", "20s", "--json"])
        { line, at in
            guard let event = Self.event(line) else { return }
            if frozenAt == nil, event["event"] as? String == "transfer", (event["bytesDone"] as? Int ?? 0) > 1 << 20 {
                nginx.freeze()
                frozenAt = at
            }
            if stalledAt == nil, event["event"] as? String == "transfer" { lastTransfer = at }
            if stalledAt == nil, event["event"] as? String == "stalled" { stalledAt = at }
        }
        nginx.thaw()
        let frozen = try #require(frozenAt, "the origin was frozen mid-transfer")
        let stalled = try #require(stalledAt, "a stalled event came: \(run.lines.map(\.0).suffix(5))")
        // What the sockets held when nginx froze still arrives: the stall counts from the last byte.
        let lastByte = max(frozen, lastTransfer ?? frozen)
        #expect(stalled - lastByte <= 15, "stalled \(stalled - lastByte) s after the last byte (frozen at \(frozen) s)")
        #expect(run.status == 69, "gave up with 69: \(run.lines.last?.0 ?? "")")
        let last = try #require(run.lines.last.flatMap { Self.event($0.0) })
        #expect((last["error"] as? String ?? "").contains("no byte arrived"), "\(last)")
        #expect(try CLI.run(["sync", "--install", install.root, "--quiet"]).status == 0, "the next sync finishes")
    }

    @Test(
        "one total for the whole update: every transfer event of a sync killed (SIGKILL) in its first bundle and of the sync that finishes it gives the same bytesTotal, through the step to the optional bundle; bytesDone never goes back within a run, resumes where the verified bytes were, and reaches the total; status from another process shows the same total"
    )
    func oneTotalAcrossKillAndSteps() throws {
        let fixture = try Fixture()
        let build = fixture.directory + "/big"
        try FileManager.default.createDirectory(atPath: build + "/hd", withIntermediateDirectories: true)
        var random = SeededRandom(seed: 78)
        for name in ["part0", "part1", "part2", "hd/h0", "hd/h1", "hd/h2"] {
            try Data((0..<(1 << 20)).map { _ in UInt8(truncatingIfNeeded: random.next()) })
                .write(to: URL(fileURLWithPath: build + "/\(name).bin"))
        }
        try fixture.publish(
            build, id: "1",
            bundles: [
                PatchSync.Bundle(name: "base", required: true, priority: 0, paths: ["part*"]),
                PatchSync.Bundle(name: "hd", required: false, priority: 1, paths: ["hd/*"])
            ])
        let nginx = try NginxOrigin(root: fixture.origin)
        defer {
            nginx.stop()
            withExtendedLifetime(fixture) {}
        }
        let install = try fixture.makeInstall(remotes: [nginx.url])
        let arguments = ["sync", "--install", install.root, "--max-rate", "1M", "--json"]
        let transfers = { (run: [(String, Double)]) in
            run.compactMap { Self.event($0.0) }.filter { $0["event"] as? String == "transfer" }
        }
        let killed = try Self.lines(
            arguments,
            kill: { line in
                (Self.event(line)?["bytesDone"] as? Int ?? 0) > 3 << 19
            })
        #expect(killed.status != 0, "the first sync was killed")
        var statusTotal: Int?
        let finished = try Self.lines(arguments) { line, _ in
            // The record is written about once a second: asked at each event until it holds a total.
            guard (statusTotal ?? 0) == 0, Self.event(line)?["event"] as? String == "transfer",
                let status = try? CLI.run(["status", "--install", install.root, "--json"]),
                let running = Self.event(status.stdout)?["running"] as? [String: Any]
            else { return }
            statusTotal = running["bytesTotal"] as? Int
        }
        #expect(finished.status == 0, "\(finished.lines.suffix(2).map(\.0))")
        let first = transfers(killed.lines), second = transfers(finished.lines)
        try #require(!first.isEmpty && !second.isEmpty)
        let totals = Set((first + second).compactMap { $0["bytesTotal"] as? Int })
        #expect(totals.count == 1, "one total across the kill and the bundle step: \(totals.sorted())")
        let total = try #require(totals.first)
        #expect(total >= 6 << 20 && total < (6 << 20) + (1 << 20), "the update's bytes: \(total)")
        for run in [first, second] {
            let done = run.compactMap { $0["bytesDone"] as? Int }
            #expect(done == done.sorted(), "bytesDone never goes back: \(done)")
        }
        let resumedAt = second.first?["bytesDone"] as? Int ?? 0
        #expect(resumedAt > 0, "the resumed sync counts the bytes verified before the kill: starts at \(resumedAt)")
        #expect(second.last?["bytesDone"] as? Int == total, "the update ends at its total")
        let steps = second.compactMap { $0["downloading"] as? [String] }
        #expect(
            steps.first == ["base"] && steps.last == ["hd"],
            "transfer events say which bundle they serve: \(Set(steps.map { $0.joined() }))")
        if let hd = second.last(where: { ($0["downloading"] as? [String]) == ["hd"] }) {
            #expect(hd["bundleBytesDone"] as? Int == hd["bundleBytesTotal"] as? Int)
            #expect((hd["bundleInstalledBytes"] as? Int) == 3 << 20)
        }
        #expect(
            statusTotal == total,
            "status from another process: \(statusTotal.map(String.init) ?? "no running sync seen")")
    }

    @Test(
        "a patch through a delta pack, of every bundle or of the required ones only: the update's total is what the sync downloads (the pack, and the chunks of the files no delta covers), the same on every transfer event; bytesDone never goes back nor leaps, and ends at the total; no delta is refused",
        arguments: [false, true])
    func deltaUpdateTotal(requiredOnly: Bool) throws {
        // Also for an install of the required bundles only: the pack names files by their index among all
        // of the build's, which the install's narrower list must map.
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.05), id: "1", bundles: SampleGame.bundles)
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let install = try fixture.makeInstall(remotes: [nginx.url]) { if requiredOnly { $0.bundles = [] } }
        #expect(try CLI.run(["sync", "--install", install.root, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.05), id: "2", bundles: SampleGame.bundles)
        let run = try CLI.run(["sync", "--install", install.root, "--json", "--max-rate", "512K"])
        #expect(run.status == 0, "\(run.stderr)")
        let result = try lastJSON(run.stdout)
        let pack = result["deltaBytes"] as? Int ?? 0, chunks = result["bytesPlanned"] as? Int ?? -1
        try #require(
            pack > 0 && (result["deltaFallbacks"] as? Int) == 0, "the patch went through a delta pack: \(result)")
        let transfers = run.stdout.split(separator: "\n").compactMap { Self.event(String($0)) }.filter {
            $0["event"] as? String == "transfer"
        }
        let totals = Set(transfers.compactMap { $0["bytesTotal"] as? Int })
        #expect(
            totals == [pack + chunks],
            "one total, the pack (\(pack)) and the chunks after it (\(chunks)): \(totals.sorted()) \(result)")
        let done = transfers.compactMap { $0["bytesDone"] as? Int }
        #expect(done == done.sorted(), "bytesDone never goes back: \(done)")
        let step = transfers.compactMap { $0["stepBytesDone"] as? Int }
        #expect(
            step == step.sorted() && step.last == transfers.last?["stepBytesTotal"] as? Int,
            "nor the step's own count: \(step)")
        let leaps = zip(done, done.dropFirst()).map { $1 - $0 }
        #expect((leaps.max() ?? 0) <= (pack + chunks) / 2, "no leap over half the update between two events: \(done)")
        #expect(done.last == pack + chunks, "the update ends at its total: \(done.suffix(3))")
    }

    @Test(
        "a request that fails is told as a `retrying` event naming the next mirror and the attempt; an origin that ignores Range (python's http.server) is told once, as a warning event and on stderr, with the bytes it wasted in the result, and the install is still exact"
    )
    func retryingAndRangeIgnored() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.02), id: "1")
        // A dead first mirror: every first try fails over to the second. The server takes a free port itself and
        // prints it: a port picked here could be taken by another test's ephemeral connection.
        let script = """
            import functools, http.server, sys
            handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
            handler.func.log_message = lambda *args: None
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            print(server.server_address[1], flush=True)
            server.serve_forever()
            """
        let server = Process()
        let out = Pipe()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = ["-c", script, fixture.origin]
        server.standardOutput = out
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer {
            kill(server.processIdentifier, SIGKILL)  // SIGTERM may be blocked in the threads that spawn it
            server.waitUntilExit()
        }
        let printed = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
        let port = try #require(
            Int(printed.trimmingCharacters(in: .whitespacesAndNewlines)),
            "python's http.server gave no port: \(printed)")
        // Requests of 64 KiB: most start inside an object, where a whole-file answer wastes what precedes them.
        let install = try fixture.makeInstall(remotes: ["http://127.0.0.1:1", "http://127.0.0.1:\(port)"]) {
            $0.maxRequestBytes = 65536
        }
        let run = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(run.status == 0, "\(run.stderr) \(run.stdout.suffix(400))")
        let events = run.stdout.split(separator: "\n").compactMap { Self.event(String($0)) }
        let retries = events.filter { $0["event"] as? String == "retrying" }
        #expect(!retries.isEmpty, "the failed first tries are told")
        #expect(
            retries.allSatisfy {
                ($0["mirror"] as? String) == "http://127.0.0.1:\(port)" && ($0["attempt"] as? Int ?? 0) >= 1
            }, "\(retries.prefix(2))")
        let warnings = events.filter { $0["event"] as? String == "warning" }
        #expect(warnings.count == 1, "one warning for an origin that ignores Range: \(warnings.count)")
        #expect((warnings.first?["message"] as? String ?? "").contains("ignores HTTP Range"))
        #expect(
            run.stderr.components(separatedBy: "ignores HTTP Range").count == 2, "said once on stderr: \(run.stderr)")
        let result = try lastJSON(run.stdout)
        #expect((result["bytesWasted"] as? Int ?? 0) > 0, "\(result)")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(try CLI.run(["verify", "--install", install.root, "--full"]).status == 0)
        // Quiet when it is normal: the root-version probe that finds nothing is no failure, even at notice level.
        let probed = try CLI.run(["sync", "--install", install.root], environment: ["PATCHSYNC_LOG": "notice"])
        #expect(probed.status == 0)
        #expect(!probed.stderr.contains("not found"), "an expected probe logged as a failure: \(probed.stderr)")
    }
}
