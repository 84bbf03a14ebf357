import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// `patchsync upload` against a store that fails (``S3FaultProxy`` in front of the S3 server), and
/// against a bucket that lost files behind upload's back (`--verify`, `--force`).
@Suite("Uploading through a flaky store, and to a bucket that lost files", .tags(.cli), .serialized)
struct UploadFaultTests {
    /// The key prefix the origin is uploaded under: s3://game/forest.
    static let prefix = "forest"
    static let timestamp = "metadata/timestamp.json"
    /// The files that change in place: sent again by every upload whose bucket is not current.
    static let mutable: Set<String> = ["metadata/root.json", timestamp]

    /// Seeds of the fault schedule and the share of requests given a fault (503, 500, a cut connection
    /// or a slow answer): at 0.3 most uploads complete after retries, at 0.6 nearly every one runs out
    /// of retries (5 failures in a row) somewhere.
    static let schedules: [(Int, Double)] = [(1, 0.3), (2, 0.3), (3, 0.3), (4, 0.6)]

    @Test(
        "an upload through a store that answers 503 and 500, cuts connections and answers slowly either completes with every file in the bucket byte-exact and timestamp.json its last PUT, or stops (69) leaving timestamp.json as it was (or, when the store took it, with every file it names there); the rerun without faults sends nothing the store acknowledged, and players sync byte-exact",
        arguments: schedules)
    func flakyStore(seed: Int, rate: Double) throws {
        let fixture = try Fixture.published(packs: false)  // build 1, every file its own object: hundreds of PUTs
        let server = try S3Server()
        let proxy = try S3FaultProxy(upstream: server.endpoint, seed: seed, faultRate: 0)
        let player = try fixture.makeInstall(remotes: ["\(server.endpoint)/\(server.bucket)/\(Self.prefix)"])

        try Self.uploadThroughFaults(fixture, server, proxy, rate: rate, player: player)
        try Self.expectInstalled(player, "1", from: try fixture.sampleBuild(1, scale: 0.002))

        // The next build over a bucket that serves the first: a stopped upload must leave build 1 whole.
        let second = try fixture.sampleBuild(2, scale: 0.002)
        try fixture.publish(second, id: "2", smallFileBytes: 0)
        try Self.uploadThroughFaults(fixture, server, proxy, rate: rate, player: player)
        try Self.expectInstalled(player, "2", from: second)
    }

    @Test(
        "a bucket that lost files behind upload's back: repo check --bucket fails naming them and repo status --bucket lists them; upload says up to date and sends nothing; upload --verify sends again exactly the files it lacks or holds with another size or other bytes (ETag), next to a new build's, metadata before timestamp.json; players then sync byte-exact; --force sends all again"
    )
    func verify() throws {
        let fixture = try Fixture.published(packs: false)
        let server = try S3Server()
        let upload = { (extra: [String]) throws -> CLI.Result in
            try Self.upload(fixture, server, via: server.endpoint, extra)
        }
        /// The origin paths PUT since the server's request `mark`, in order.
        let putsSince = { (mark: Int) -> [String] in
            server.requests().dropFirst(mark).filter { $0.method == "PUT" }.compactMap {
                Self.originPath($0.path, server.bucket)
            }
        }
        let first = try upload([])
        #expect(first.status == 0, "\(first.stdout) \(first.stderr)")
        let files = try Self.servedFiles(fixture.origin)
        let objects = files.filter { $0.hasPrefix("objects/") }
        try #require(objects.count >= 4)
        let (lost, shortened, lostLater, corrupted) = (objects[0], objects[1], objects[2], objects[3])
        try Self.tamper(server, lost)
        try Self.tamper(server, shortened, bytes: Data("short".utf8))
        // The same size, other bytes: a size comparison passes it, a player's hash check does not.
        var flipped = try Data(contentsOf: URL(fileURLWithPath: fixture.origin + "/" + corrupted))
        flipped[flipped.count / 2] ^= 0xff
        try Self.tamper(server, corrupted, bytes: flipped)
        let damaged = try Self.differing(server, origin: fixture.origin)
        #expect(
            Set(damaged) == [lost, shortened, corrupted],
            "the bucket lacks one file, holds one shortened, one changed: \(damaged)")

        var mark = server.requests().count
        let plain = try upload([])
        #expect(plain.status == 0 && plain.stdout.contains("is up to date"), "\(plain.stdout) \(plain.stderr)")
        #expect(putsSince(mark).isEmpty, "a plain upload goes by the bucket's timestamp.json, and sends nothing")

        // Monitoring sees it: repo check --bucket fails naming both files, repo status --bucket shows them.
        let bucketArgs = ["--bucket", "s3://\(server.bucket)/\(Self.prefix)", "--endpoint", server.endpoint]
        let check = try CLI.run(
            ["repo", "check", "--origin", fixture.origin] + bucketArgs, environment: server.credentials)
        #expect(
            check.status == 65 && check.stderr.contains(lost) && check.stderr.contains(shortened)
                && check.stderr.contains(corrupted)
                && check.stderr.contains(
                    "patchsync upload \(fixture.origin) s3://\(server.bucket)/\(Self.prefix) --endpoint \(server.endpoint) --verify"
                ),
            "\(check.stderr)")
        let status = try CLI.run(
            ["repo", "status", "--origin", fixture.origin, "--json"] + bucketArgs, environment: server.credentials)
        let seen = try #require(try UploadTests.json(status.stdout)["bucket"] as? [String: Any])
        #expect(
            Set(seen["missing"] as? [String] ?? []) == [lost, shortened, corrupted] && seen["current"] as? Bool == true,
            "\(status.stdout)")

        mark = server.requests().count
        let verified = try upload(["--verify"])
        #expect(verified.status == 0, "\(verified.stdout) \(verified.stderr)")
        #expect(
            putsSince(mark).sorted() == [lost, shortened, corrupted].sorted(),
            "exactly the lost, the shortened and the changed file, once each: \(putsSince(mark))")
        #expect(
            verified.stdout.contains("re-sent 3 files") && verified.stdout.contains(lost)
                && verified.stdout.contains(shortened)
                && verified.stdout.contains(corrupted),
            "\(verified.stdout)")
        #expect(try Self.differing(server, origin: fixture.origin).isEmpty, "the bucket holds every file byte-exact")
        #expect(
            try CLI.run(["repo", "check", "--origin", fixture.origin] + bucketArgs, environment: server.credentials)
                .status == 0)
        let player = try fixture.makeInstall(remotes: ["\(server.endpoint)/\(server.bucket)/\(Self.prefix)"])
        try Self.expectInstalled(player, "1", from: try fixture.sampleBuild(1, scale: 0.002))

        // A bucket that lacks nothing: one listing request on top of the timestamp.json and root.json GETs, nothing sent.
        mark = server.requests().count
        let clean = try upload(["--verify", "--json"])
        let cleanReport = try UploadTests.json(clean.stdout)
        #expect(clean.status == 0 && putsSince(mark).isEmpty, "\(clean.stdout) \(clean.stderr)")
        #expect(
            cleanReport["alreadyCurrent"] as? Bool == true && cleanReport["verified"] as? Bool == true
                && (cleanReport["resent"] as? [String])?.isEmpty == true && cleanReport["requests"] as? Int == 3,
            "\(clean.stdout)")
        #expect(
            Set(cleanReport.keys).subtracting(JSONShapeTests.envelope)
                == [
                    "alreadyCurrent", "bytesUploaded", "destination", "filesSkipped", "filesUploaded", "requests",
                    "resent", "verified"
                ],
            "upload's --json keys")

        // A new build, and a file lost meanwhile: --verify sends both, content first, timestamp.json last.
        let second = try fixture.sampleBuild(2, scale: 0.002)
        try fixture.publish(second, id: "2", smallFileBytes: 0)
        try Self.tamper(server, lostLater)
        mark = server.requests().count
        let next = try upload(["--verify", "--json"])
        #expect(next.status == 0, "\(next.stdout) \(next.stderr)")
        #expect(try UploadTests.json(next.stdout)["resent"] as? [String] == [lostLater], "\(next.stdout)")
        let sent = putsSince(mark)
        let added = Set(try Self.servedFiles(fixture.origin)).subtracting(files)
        #expect(Set(sent) == added.union([lostLater]).union(Self.mutable) && sent.count == Set(sent).count, "\(sent)")
        Self.expectOrder(sent, completed: true)
        try Self.expectInstalled(player, "2", from: second)

        // --force: every file again, though the bucket's timestamp.json is the origin's.
        let all = try Self.servedFiles(fixture.origin)
        mark = server.requests().count
        let forced = try upload(["--force", "--json"])
        #expect(forced.status == 0, "\(forced.stdout) \(forced.stderr)")
        #expect(try UploadTests.json(forced.stdout)["filesUploaded"] as? Int == all.count)
        #expect(putsSince(mark).sorted() == all, "every file of the origin, once")
        Self.expectOrder(putsSince(mark), completed: true)
    }

    // MARK: - One upload through faults, and its rerun

    /// Uploads the origin through `proxy` giving faults to a share `rate` of the requests, then again
    /// without faults, and checks what each run promises; `player` syncs from the bucket as the faulty
    /// run left it.
    static func uploadThroughFaults(
        _ fixture: Fixture, _ server: S3Server, _ proxy: S3FaultProxy, rate: Double, player: Install,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let local = try Data(contentsOf: URL(fileURLWithPath: fixture.origin + "/" + timestamp))
        let before = try get(server, timestamp)
        proxy.setFaultRate(rate)
        let mark = proxy.requests().count
        let faulty = try upload(fixture, server, via: proxy.endpoint)
        let run = Array(proxy.requests().dropFirst(mark))
        let context = "fault rate \(rate), exit \(faulty.status): \(faulty.stdout) \(faulty.stderr)"
        let faults = run.filter { $0.fault != "none" }.count
        print("upload through faults at rate \(rate): \(run.count) requests, \(faults) faults, exit \(faulty.status)")
        #expect(faulty.status == 0 || faulty.status == 69, "\(context)", sourceLocation: sourceLocation)
        #expect(faults > 0, "the schedule gave faults", sourceLocation: sourceLocation)
        expectOrder(puts(run, server.bucket), completed: faulty.status == 0, sourceLocation: sourceLocation)
        let after = try get(server, timestamp)
        let taken = run.contains {
            $0.method == "PUT" && originPath($0.target, server.bucket) == timestamp && $0.applied
        }
        if faulty.status == 0 || taken {
            #expect(
                after == local, "the bucket serves the origin's timestamp.json: \(context)",
                sourceLocation: sourceLocation)
            let missing = try differing(server, origin: fixture.origin)
            #expect(
                missing.isEmpty, "every file it names is there: \(missing.prefix(5))", sourceLocation: sourceLocation)
        } else {
            #expect(
                after == before, "a stopped upload leaves timestamp.json as it was: \(context)",
                sourceLocation: sourceLocation)
        }
        if after != nil {
            let sync = try CLI.run(["sync", "--install", player.root])
            #expect(
                sync.status == 0, "a player syncs from the bucket as the upload left it: \(sync.stderr)",
                sourceLocation: sourceLocation)
        }
        try expectRerun(fixture, server, proxy, current: after == local, sourceLocation: sourceLocation)
    }

    /// The upload again, without faults: it completes, sends no file the store acknowledged before (but
    /// the two that change in place), nothing at all when the bucket is current, timestamp.json last,
    /// and leaves every file of the origin in the bucket byte-exact.
    static func expectRerun(
        _ fixture: Fixture, _ server: S3Server, _ proxy: S3FaultProxy, current: Bool, sourceLocation: SourceLocation
    ) throws {
        proxy.setFaultRate(0)
        let earlier = proxy.requests()
        let rerun = try upload(fixture, server, via: proxy.endpoint, ["--json"])
        #expect(rerun.status == 0, "\(rerun.stdout) \(rerun.stderr)", sourceLocation: sourceLocation)
        let sent = puts(Array(proxy.requests().dropFirst(earlier.count)), server.bucket)
        let acknowledged = Set(puts(earlier.filter(\.acknowledged), server.bucket))
        let again = sent.filter { acknowledged.contains($0) && !mutable.contains($0) }
        #expect(
            again.isEmpty, "the rerun sends nothing the store acknowledged: \(again.prefix(5))",
            sourceLocation: sourceLocation)
        if current {
            #expect(
                sent.isEmpty, "a bucket already current gets nothing: \(sent.prefix(5))", sourceLocation: sourceLocation
            )
            #expect(
                try UploadTests.json(rerun.stdout)["alreadyCurrent"] as? Bool == true, sourceLocation: sourceLocation)
        }
        expectOrder(sent, completed: true, sourceLocation: sourceLocation)
        let local = try Data(contentsOf: URL(fileURLWithPath: fixture.origin + "/" + timestamp))
        let served = try get(server, timestamp)
        #expect(served == local, "the bucket serves the origin's timestamp.json", sourceLocation: sourceLocation)
        let missing = try differing(server, origin: fixture.origin)
        #expect(
            missing.isEmpty, "the bucket holds every file of the origin byte-exact: \(missing.prefix(5))",
            sourceLocation: sourceLocation)
    }

    /// Checks the order of one upload's PUTs (every attempt, in order): content (objects, manifests)
    /// before any metadata, no other file once timestamp.json was sent, and, for a run that completed
    /// and sent anything, timestamp.json the last.
    static func expectOrder(_ puts: [String], completed: Bool, sourceLocation: SourceLocation = #_sourceLocation) {
        let isContent = { (path: String) in path.hasPrefix("objects/") || path.hasPrefix("targets/") }
        if let lastContent = puts.lastIndex(where: isContent),
            let firstMetadata = puts.firstIndex(where: { !isContent($0) })
        {
            #expect(lastContent < firstMetadata, "content before any metadata: \(puts)", sourceLocation: sourceLocation)
        }
        if let first = puts.firstIndex(of: timestamp) {
            let later = puts[first...].filter { $0 != timestamp }
            #expect(
                later.isEmpty, "nothing is sent after timestamp.json: \(later.prefix(5))",
                sourceLocation: sourceLocation)
        }
        if completed && !puts.isEmpty {
            #expect(
                puts.last == timestamp, "timestamp.json is the last PUT: \(puts.suffix(3))",
                sourceLocation: sourceLocation)
        }
    }

    @Test(
        "a root key rotated alone (timestamp.json unchanged) still reaches the bucket: the next upload sends the new root.json and its versioned copy, and repo check --bucket finds nothing missing (seen at release-history seed 918280)"
    )
    func rootRotationAlone() throws {
        let fixture = try Fixture.published()
        let server = try S3Server()
        #expect(try Self.upload(fixture, server, via: server.endpoint).status == 0)
        let newKeys = fixture.directory + "/new-keys"
        #expect(try CLI.run(["keygen", "--out", newKeys]).status == 0)
        let rotated = try CLI.run(
            [
                "repo", "rotate-root", "--origin", fixture.origin, "--root-key", fixture.keyDirectory + "/root.key",
                "--new-root-key", newKeys + "/root.key"
            ])
        #expect(rotated.status == 0, "\(rotated.stderr)")
        let sent = try Self.upload(fixture, server, via: server.endpoint, ["--json"])
        #expect(sent.status == 0 && !sent.stdout.contains("is up to date"), "\(sent.stdout) \(sent.stderr)")
        #expect(try Self.differing(server, origin: fixture.origin).isEmpty, "the bucket holds every file byte-exact")
        let check = try CLI.run(
            [
                "repo", "check", "--origin", fixture.origin, "--bucket", "s3://\(server.bucket)/\(Self.prefix)",
                "--endpoint", server.endpoint
            ],
            environment: server.credentials)
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
    }

    // MARK: - The bucket, as players and other tools see it

    /// `patchsync upload ORIGIN s3://BUCKET/forest --endpoint ENDPOINT EXTRA…` with the server's keys.
    static func upload(_ fixture: Fixture, _ server: S3Server, via endpoint: String, _ extra: [String] = []) throws
        -> CLI.Result
    {
        try CLI.run(
            ["upload", fixture.origin, "s3://\(server.bucket)/\(prefix)", "--endpoint", endpoint] + extra,
            environment: server.credentials)
    }

    /// The files of `origin` an upload sends, sorted: those under objects/, targets/ and metadata/ with no
    /// name starting with a dot.
    static func servedFiles(_ origin: String) throws -> [String] {
        try UploadTests.originFiles(origin).filter { path in
            ["objects/", "targets/", "metadata/"].contains { path.hasPrefix($0) }
                && !path.split(separator: "/").contains { $0.hasPrefix(".") }
        }
    }

    /// The origin path a request target or logged path names (`/BUCKET/forest/objects/…` →
    /// `objects/…`), percent-decoded; nil for anything else (the bucket itself, a listing).
    static func originPath(_ target: String, _ bucket: String) -> String? {
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let start = "/\(bucket)/\(prefix)/"
        guard path.hasPrefix(start) else { return nil }
        return String(path.dropFirst(start.count)).removingPercentEncoding
    }

    /// The origin paths of the PUTs among `requests`, in order, every attempt.
    static func puts(_ requests: [S3FaultProxy.Request], _ bucket: String) -> [String] {
        requests.filter { $0.method == "PUT" }.compactMap { originPath($0.target, bucket) }
    }

    /// The URL of origin path `path` in the bucket, for anonymous GETs.
    static func url(_ server: S3Server, _ path: String) -> String {
        let key = prefix + "/" + path
        return "\(server.endpoint)/\(server.bucket)/"
            + (key.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? key)
    }

    /// What the bucket serves for origin path `path` to anyone (an anonymous GET, as a player's); nil
    /// when it has no such key.
    static func get(_ server: S3Server, _ path: String) throws -> Data? {
        let file = NSTemporaryDirectory() + "patchsync-get-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: file) }
        let result = try CLI.runProgram(
            "/usr/bin/curl", ["-s", "-g", "-o", file, "-w", "%{http_code}", url(server, path)])
        guard result.stdout == "200" else { return nil }
        return try Data(contentsOf: URL(fileURLWithPath: file))
    }

    /// The files of `origin` that the bucket lacks or serves with other bytes, every one fetched by a
    /// single curl (anonymous GETs on one connection).
    static func differing(_ server: S3Server, origin: String) throws -> [String] {
        let files = try Self.servedFiles(origin)
        let folder = NSTemporaryDirectory() + "patchsync-bucket-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let config = files.indices.map { "url = \"\(url(server, files[$0]))\"\noutput = \"\(folder)/\($0)\"\n" }
            .joined()
        try config.write(toFile: folder + "/curl.config", atomically: true, encoding: .utf8)
        _ = try CLI.runProgram("/usr/bin/curl", ["-s", "-g", "-K", folder + "/curl.config"])
        return files.indices.filter {
            FileManager.default.contents(atPath: "\(folder)/\($0)")
                != FileManager.default.contents(atPath: origin + "/" + files[$0])
        }.map { files[$0] }
    }

    /// Changes the bucket behind upload's back, as another tool or a lifecycle rule would (boto3, with
    /// the publisher's keys): deletes origin path `path`, or with `bytes` makes them its content.
    static func tamper(_ server: S3Server, _ path: String, bytes: Data? = nil) throws {
        var arguments = [
            "-c", tamperScript, server.endpoint, server.accessKeyId, server.secretAccessKey, server.bucket,
            prefix + "/" + path
        ]
        let file = NSTemporaryDirectory() + "patchsync-tamper-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: file) }
        if let bytes {
            try bytes.write(to: URL(fileURLWithPath: file))
            arguments.append(file)
        }
        let result = try CLI.runProgram(S3Server.packageRoot + "/.venv-tuf/bin/python", arguments)
        #expect(result.status == 0, "changing \(path) in the bucket: \(result.stdout)")
    }

    static let tamperScript = """
        import sys
        import boto3
        endpoint, key_id, secret, bucket, key = sys.argv[1:6]
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=key_id, aws_secret_access_key=secret)
        if len(sys.argv) > 6:
            with open(sys.argv[6], "rb") as body:
                s3.put_object(Bucket=bucket, Key=key, Body=body.read())
        else:
            s3.delete_object(Bucket=bucket, Key=key)
        """

    /// Syncs and applies `player`, and checks that its live tree is `build` byte for byte (with the
    /// modes an install gives: read-only) as build `id`.
    static func expectInstalled(
        _ player: Install, _ id: String, from build: String, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let sync = try CLI.run(["sync", "--install", player.root])
        #expect(sync.status == 0, "\(sync.stderr)", sourceLocation: sourceLocation)
        let apply = try CLI.run(["apply", "--install", player.root])
        #expect(
            apply.status == 0 && player.currentBuild() == id, "\(apply.stdout) \(apply.stderr)",
            sourceLocation: sourceLocation)
        let installed = try treeFacts(player.root + "/current")
        let expected = try treeFacts(build).mapValues { FileFacts(sha256: $0.sha256, mode: $0.mode & 0o555) }
        #expect(
            installed == expected, "the player's build \(id) is the published folder", sourceLocation: sourceLocation)
    }
}
