import Foundation
import PatchSync
import PatchSyncTestSupport
import Synchronization
import Testing

/// A repository kept in an S3-compatible bucket (moto on loopback), written from several machines: each
/// "machine" is a cache folder of its own, with only the keys and the bucket.
final class BucketWorld: @unchecked Sendable {
    let fixture: Fixture
    let server: S3Server
    let url = "s3://game/repo"
    /// The lease's time to live for every command of the world (short, so a killed writer lets go soon).
    let leaseSeconds: Double?

    init(leaseSeconds: Double? = 2) throws {
        fixture = try Fixture()
        server = try S3Server()
        self.leaseSeconds = leaseSeconds
        let created = try patchsync(
            [
                "repo", "init", "--root-key", keys + "/root.key", "--targets-key", keys + "/targets.key",
                "--online-key", keys + "/online.key"
            ], machine: "first")
        guard created.status == 0 else { throw BucketSetupError(description: "repo init: \(created.stderr)") }
    }

    var keys: String { fixture.keyDirectory }
    var signing: [String] { ["--targets-key", keys + "/targets.key", "--online-key", keys + "/online.key"] }
    var environment: [String: String] {
        server.credentials.merging(leaseSeconds.map { ["PATCHSYNC_BUCKET_LEASE_SECONDS": "\($0)"] } ?? [:]) { $1 }
    }
    /// The players' URL of the repository (anonymous GETs of the bucket).
    var remote: String { "\(server.endpoint)/game/repo" }

    func cache(_ machine: String) -> String { fixture.directory + "/cache-" + machine }

    /// The arguments that name the bucket for `machine`.
    func origin(_ machine: String) -> [String] {
        ["--origin", url, "--endpoint", server.endpoint, "--cache", cache(machine)]
    }

    func patchsync(_ arguments: [String], machine: String, extra: [String: String] = [:]) throws -> CLI.Result {
        try CLI.run(arguments + origin(machine), environment: environment.merging(extra) { $1 })
    }

    func publishArguments(_ build: String, id: String, machine: String) -> [String] {
        ["publish", build, "--build-id", id, "--keep-builds", "100", "--wait", "5m", "--json"] + signing
            + origin(machine)
    }

    /// A build folder of its own for `id`: a shared pak with a few changed spots, and files of its own.
    func build(_ id: String, number: Int) throws -> String {
        let folder = fixture.directory + "/build-" + id
        try FileManager.default.createDirectory(atPath: folder + "/data", withIntermediateDirectories: true)
        var rng = SeededRandom(seed: 99)
        var pak = (0..<(256 << 10)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        var local = SeededRandom(seed: UInt64(number) &* 7919)
        for _ in 0..<3 {
            let at = Int(local.next() % UInt64(pak.count - 4096))
            for k in 0..<4096 { pak[at + k] = UInt8(truncatingIfNeeded: local.next()) }
        }
        try Data(pak).write(to: URL(fileURLWithPath: folder + "/data/world.pak"))
        try Data("build \(id)\n".utf8).write(to: URL(fileURLWithPath: folder + "/version.txt"))
        try Data(repeating: UInt8(number % 251), count: 1000 + number).write(
            to: URL(fileURLWithPath: folder + "/data/own-\(number).bin"))
        return folder
    }

    /// The builds the bucket lists on live, newest first (read on a machine of its own).
    func listed(machine: String = "reader") throws -> [String] {
        let result = try patchsync(["repo", "status", "--json"], machine: machine)
        guard result.status == 0,
            let line = result.stdout.split(separator: "\n").last(where: { $0.hasPrefix("{") }),
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let channels = object["channels"] as? [[String: Any]]
        else { throw BucketSetupError(description: "repo status: \(result.stdout) \(result.stderr)") }
        let live = channels.first { $0["channel"] as? String == "live" }
        return ((live?["builds"] as? [[String: Any]]) ?? []).compactMap { $0["buildId"] as? String }
    }
}

struct BucketSetupError: Error, CustomStringConvertible {
    var description: String
}

@Suite("An origin in a bucket: any machine with the keys publishes", .tags(.cli), .serialized)
struct BucketOriginTests {
    @Test(
        "two publishers on two machines, at the same moment, 20 rounds (some killed): every build reported published is listed and installable, none is lost, and a killed publisher leaves nothing a player sees"
    )
    func twoPublishers() throws {
        let world = try BucketWorld()
        let install = world.fixture.directory + "/player"
        let created = try CLI.run([
            "init", "--install", install, "--remote", world.remote, "--root",
            world.cache("first") + "/metadata/1.root.json"
        ])
        try #require(created.status == 0, "\(created.stderr)")
        var rng = SeededRandom(seed: 0xB0C7)
        var published: [String] = [], killed = 0, killedLanded = 0
        for round in 1...20 {
            let ids = ["\(round).a", "\(round).b"]
            let folders = try ids.enumerated().map { k, id in try world.build(id, number: round * 2 + k) }
            let victim = round % 4 == 0 ? Int(rng.next() % 2) : nil
            // The victim is killed at a point of its run: its work stored, its metadata sent, or (any
            // point) while it waits for or renews the lease.
            let point = ["publishStored", "bucketMetadataSent", "bucketMetadataSent"][Int(rng.next() % 3)]
            let results = Mutex<[Int: CLI.Result]>([:])
            DispatchQueue.concurrentPerform(iterations: 2) { k in
                let machine = k == 0 ? "east" : "west"
                let arguments = world.publishArguments(folders[k], id: ids[k], machine: machine)
                let environment = world.environment.merging(victim == k ? ["PATCHSYNC_CRASH_AT": point] : [:]) { $1 }
                if victim == k {
                    _ = try? CLI.run(arguments, environment: environment)
                    return
                }
                let result =
                    (try? CLI.run(arguments, environment: environment))
                    ?? CLI.Result(status: -1, stdout: "", stderr: "did not run")
                results.withLock { $0[k] = result }
            }
            let done = results.withLock { $0 }
            for (k, result) in done {
                #expect(result.status == 0, "round \(round): \(ids[k]) exited \(result.status): \(result.stderr)")
                if result.status == 0 { published.append(ids[k]) }
            }
            let listed = try world.listed()
            for id in published {
                #expect(listed.contains(id), "round \(round): \(id) was published and is not listed")
            }
            if let victim {
                killed += 1
                if listed.contains(ids[victim]) { killedLanded += 1 }
            }
            // A player syncs whatever is newest, and gets exactly that build.
            let sync = try CLI.run(["sync", "--install", install, "--quiet"])
            #expect(sync.status == 0, "round \(round): \(sync.stdout) \(sync.stderr)")
            #expect(try CLI.run(["apply", "--install", install]).status == 0)
            let newest = try #require(listed.first)
            let folder = world.fixture.directory + "/build-" + newest
            #expect(
                try treeFacts(install + "/current").mapValues(\.sha256) == treeFacts(folder).mapValues(\.sha256),
                "round \(round): the player's tree is not build \(newest)")
        }
        // Every listed build's content is in the bucket (each file its signed metadata names).
        let check = try world.patchsync(["repo", "check", "--bucket", world.url, "--json"], machine: "reader")
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
        #expect(published.count + killedLanded >= 35 && killed == 5, "\(published.count) published, \(killed) killed")
    }

    @Test(
        "a machine with only the keys and the bucket publishes the next build with deltas, and a player on the previous build patches from them"
    )
    func freshMachinePublishesDeltas() throws {
        let world = try BucketWorld()
        let first = try world.build("1", number: 1), second = try world.build("2", number: 2)
        #expect(
            try CLI.run(world.publishArguments(first, id: "1", machine: "ci-1"), environment: world.environment).status
                == 0)
        let install = world.fixture.directory + "/player"
        _ = try CLI.run([
            "init", "--install", install, "--remote", world.remote, "--root",
            world.cache("first") + "/metadata/1.root.json"
        ])
        #expect(try CLI.run(["sync", "--install", install, "--quiet"]).status == 0)
        #expect(try CLI.run(["apply", "--install", install]).status == 0)
        let result = try CLI.run(
            world.publishArguments(second, id: "2", machine: "ci-2"), environment: world.environment)
        #expect(result.status == 0, "\(result.stderr)")
        let line = try #require(result.stdout.split(separator: "\n").last { $0.hasPrefix("{") })
        let report = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        let deltas = try #require(report["deltas"] as? [[String: Any]])
        #expect(deltas.first?["from"] as? String == "1", "a delta from the build the new machine never had: \(report)")
        let sync = try CLI.run(["sync", "--install", install, "--json"])
        let staged = sync.stdout.split(separator: "\n").last { $0.contains("\"result\"") }.map(String.init) ?? ""
        #expect(
            sync.status == 0 && staged.contains("\"filesPatched\":") && !staged.contains("\"filesPatched\":0"),
            "\(staged)")
        #expect(try CLI.run(["apply", "--install", install]).status == 0)
        let facts = try treeFacts(install + "/current").mapValues(\.sha256)
        let expected = try treeFacts(second).mapValues(\.sha256)
        #expect(facts == expected, "\(facts.keys.sorted()) \(expected.keys.sorted())")
    }

    @Test(
        "a writer whose lease was taken over is told to run again (75) and changes nothing a player reads; its cache is brought back to the bucket's state by the next command"
    )
    func staleWriterIsRefused() throws {
        let world = try BucketWorld(leaseSeconds: nil)
        let one = try world.build("1", number: 1), two = try world.build("2", number: 2)
        let three = try world.build("3", number: 3)
        #expect(
            try CLI.run(world.publishArguments(one, id: "1", machine: "a"), environment: world.environment).status == 0)
        let bucket = try S3Bucket(
            url: world.url, endpoint: world.server.endpoint, region: "us-east-1",
            credentials: .init(accessKeyId: world.server.accessKeyId, secretAccessKey: world.server.secretAccessKey))
        // Machine A starts a session and stalls; its lease is then lost (deleted, as a takeover would).
        var stalled = BucketOrigin(bucket: bucket, cache: world.cache("a"))
        stalled.leaseTimeToLive = 600
        let session = try stalled.open(purpose: "publishing", writes: true)
        defer { session.close() }
        world.server.delete("repo/" + BucketLease.key)
        // Machine B publishes and commits meanwhile.
        #expect(
            try CLI.run(world.publishArguments(two, id: "2", machine: "b"), environment: world.environment).status == 0)
        let before = try #require(
            try Data(contentsOf: URL(fileURLWithPath: world.cache("b") + "/metadata/timestamp.json")))
        // A publishes in its stale cache and tries to commit.
        var options = Publisher.Options(
            buildDirectory: three, origin: session.folder, buildId: try BuildID("3"),
            bundles: try BundleRules(bundles: [.base]))
        options.keepBuilds = 100
        _ = try Publisher(options: options, signers: world.fixture.signers).run()
        #expect(throws: PatchSyncError.self) { _ = try session.commit() }
        do { _ = try session.commit() } catch { #expect(error.code == .deferred, "\(error)") }
        session.close()
        let served = try CLI.runProgram("/usr/bin/curl", ["-s", world.remote + "/metadata/timestamp.json"]).stdout
        #expect(Data(served.utf8) == before, "the bucket's timestamp.json is still B's")
        #expect(try world.listed() == ["2", "1"])
        // A's next command starts from the bucket's state, and lands.
        let retried = try CLI.run(world.publishArguments(three, id: "3", machine: "a"), environment: world.environment)
        #expect(retried.status == 0, "\(retried.stdout) \(retried.stderr)")
        #expect(try world.listed() == ["3", "2", "1"])
    }

    @Test(
        "a publisher killed just before its commit leaves nothing a player sees; the next writer waits out its lease and removes what it left"
    )
    func killedBeforeCommit() throws {
        let world = try BucketWorld()
        let one = try world.build("1", number: 1), two = try world.build("2", number: 2)
        #expect(
            try CLI.run(world.publishArguments(one, id: "1", machine: "a"), environment: world.environment).status == 0)
        let killed = try CLI.run(
            world.publishArguments(two, id: "2", machine: "a"),
            environment: world.environment.merging(["PATCHSYNC_CRASH_AT": "bucketMetadataSent"]) { $1 })
        #expect(killed.status != 0)
        #expect(try world.listed() == ["1"], "nothing of the killed publish is listed")
        let leftovers = world.server.requests().filter { $0.method == "PUT" && $0.path.contains("/metadata/3.") }
        #expect(!leftovers.isEmpty, "the killed publisher had sent its versioned metadata")
        let before = world.server.requests().count
        let again = try CLI.run(world.publishArguments(two, id: "2", machine: "b"), environment: world.environment)
        #expect(again.status == 0, "\(again.stderr)")
        let lease = world.server.requests().dropFirst(before).filter { $0.path.hasSuffix(BucketLease.key) }
        #expect(
            lease.contains { $0.method == "PUT" && $0.status == 412 } && lease.contains { $0.method == "GET" },
            "it found the killed holder's lease and waited it out: \(lease)")
        #expect(try world.listed() == ["2", "1"])
        let requests = Array(world.server.requests().dropFirst(before))
        let fence = requests.firstIndex { $0.method == "PUT" && $0.path.hasSuffix("/metadata/timestamp.json") }
        let delete = requests.firstIndex { $0.method == "DELETE" && $0.path.contains("/metadata/3.") }
        let rewrite = requests.lastIndex { $0.method == "PUT" && $0.path.contains("/metadata/3.") }
        #expect(
            fence != nil && delete != nil && rewrite != nil && fence! < delete! && delete! < rewrite!,
            "timestamp.json fenced, then the leftover versioned metadata deleted, then the new versions written: \(requests.filter { $0.path.contains("/metadata/") })"
        )
    }

    @Test(
        "the lease at its default (60 s): a healthy publish longer than a short lease keeps it by renewal, and a killed holder is waited out for the default time, not less"
    )
    func leaseTimes() throws {
        let world = try BucketWorld(leaseSeconds: nil)
        #expect(BucketLease.timeToLive == 60)
        let one = try world.build("1", number: 1)
        // A healthy publish of a few seconds under a 1 s lease: renewed, never taken over.
        let big = world.fixture.directory + "/build-big"
        try FileManager.default.createDirectory(atPath: big, withIntermediateDirectories: true)
        var rng = SeededRandom(seed: 5)
        try Data((0..<(24 << 20)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }).write(
            to: URL(fileURLWithPath: big + "/big.pak"))
        let short = ["PATCHSYNC_BUCKET_LEASE_SECONDS": "1"]
        let earlier = world.server.requests().count
        let slow = try CLI.start(
            world.publishArguments(big, id: "big", machine: "a"), environment: world.environment.merging(short) { $1 })
        Poll.until {
            world.server.requests().dropFirst(earlier).contains {
                $0.method == "PUT" && $0.path.hasSuffix(BucketLease.key) && $0.status == 200
            }
        }
        let waiting = try CLI.run(
            world.publishArguments(one, id: "1", machine: "b"), environment: world.environment.merging(short) { $1 })
        slow.process.waitUntilExit()
        #expect(slow.process.terminationStatus == 0, "the long publish kept its lease")
        let leaseWrites = world.server.requests().filter { $0.method == "PUT" && $0.path.hasSuffix(BucketLease.key) }
        #expect(leaseWrites.filter { $0.status == 200 }.count >= 4, "taken, renewed, released: \(leaseWrites)")
        #expect(waiting.status == 0, "\(waiting.stderr)")
        let order = try world.listed()
        #expect(order == ["1", "big"], "the second waited for the first and published above it: \(order)")
        // The default: a holder killed before its commit is waited out for 60 s.
        let two = try world.build("2", number: 2)
        let killed = try CLI.run(
            world.publishArguments(two, id: "2", machine: "a"),
            environment: world.environment.merging(["PATCHSYNC_CRASH_AT": "bucketMetadataSent"]) { $1 })
        #expect(killed.status != 0)
        let refused = try world.patchsync(["repo", "refresh", "--key", world.keys + "/online.key"], machine: "b")
        #expect(refused.status == 75 && refused.stderr.contains("60 s after its last renewal"), "\(refused.stderr)")
        // Two waiters start together: one gives up after 45 s (the holder's lease still counts), the other
        // takes it over once the lease has gone 60 s without renewal.
        let outcomes = Mutex<[String: CLI.Result]>([:])
        DispatchQueue.concurrentPerform(iterations: 2) { k in
            let wait = k == 0 ? "45s" : "3m"
            let result = try? world.patchsync(
                ["repo", "refresh", "--key", world.keys + "/online.key", "--wait", wait], machine: k == 0 ? "c" : "d")
            outcomes.withLock { $0[wait] = result }
        }
        let done = outcomes.withLock { $0 }
        #expect(done["45s"]?.status == 75, "\(done["45s"]?.stderr ?? "")")
        #expect(done["3m"]?.status == 0, "\(done["3m"]?.stderr ?? "")")
    }
}
