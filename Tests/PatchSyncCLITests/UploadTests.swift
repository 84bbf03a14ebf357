import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("Uploading an origin to an S3-compatible bucket", .tags(.cli), .serialized)
struct UploadTests {
    /// The origin's files a client reads (what an upload sends the first time).
    static func originFiles(_ origin: String) throws -> [String] {
        try PruneTests.files(origin).filter { !$0.hasPrefix(".") }.sorted()
    }

    static func json(_ text: String) throws -> [String: Any] {
        let line = try #require(text.split(separator: "\n").last { $0.hasPrefix("{") })
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    /// The response headers of an anonymous GET of `key` in the bucket (curl), lower-cased.
    static func headers(_ server: S3Server, _ key: String) throws -> String {
        try CLI.runProgram(
            "/usr/bin/curl", ["-s", "-D", "-", "-o", "/dev/null", "\(server.endpoint)/\(server.bucket)/\(key)"]
        )
        .stdout.lowercased()
    }

    @Test(
        "upload sends objects and manifests before the metadata and timestamp.json last, with immutable Cache-Control on content and a short one on timestamp.json; the second build sends only what is new; a stopped upload resumes without sending again; players sync from the bucket; prune removes from the bucket too"
    )
    func lifecycle() throws {
        let fixture = try Fixture()
        let server = try S3Server()
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let upload = { (extra: [String]) throws -> CLI.Result in
            try CLI.run(
                ["upload", fixture.origin, "s3://game/forest", "--endpoint", server.endpoint, "--json"] + extra,
                environment: server.credentials)
        }
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.02), id: "1.0+1")  // a "+" in keys, as S3 signs it
        let first = try upload([])
        #expect(first.status == 0, "\(first.stdout) \(first.stderr)")
        let firstReport = try Self.json(first.stdout)
        let files = try Self.originFiles(fixture.origin)
        #expect(firstReport["filesUploaded"] as? Int == files.count)
        let puts = server.requests().filter { $0.method == "PUT" && $0.path.hasPrefix("/game/forest/") }.map(\.path)
        #expect(Set(puts) == Set(files.map { "/game/forest/" + $0 }), "every file once, nothing else")
        #expect(puts.last == "/game/forest/metadata/timestamp.json", "timestamp.json goes last")
        let lastContent = try #require(puts.lastIndex { $0.contains("/objects/") || $0.contains("/targets/") })
        let firstMetadata = try #require(puts.firstIndex { $0.contains("/metadata/") })
        #expect(lastContent < firstMetadata, "content and manifests before any metadata")
        let object = try #require(files.first { $0.hasPrefix("objects/") })
        #expect(
            try Self.headers(server, "forest/" + object).contains("cache-control: public, max-age=31536000, immutable"))
        #expect(
            try Self.headers(server, "forest/metadata/timestamp.json").contains("cache-control: public, max-age=60\r"))

        // A player installs from the bucket (anonymous range GETs), and verifies every byte.
        let install = try fixture.makeInstall(remotes: ["\(server.endpoint)/game/forest"])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(try CLI.run(["verify", "--install", install.root, "--full"]).status == 0)

        let again = try upload([])
        let againReport = try Self.json(again.stdout)
        #expect(
            again.status == 0 && againReport["alreadyCurrent"] as? Bool == true && againReport["requests"] as? Int == 2,
            "an origin already uploaded costs two requests (timestamp.json and root.json)")

        // The next build: only its new objects, its manifest and new metadata go.
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.02), id: "2")
        let before = server.requests().count
        let second = try upload([])
        #expect(second.status == 0, "\(second.stdout)")
        let secondReport = try Self.json(second.stdout)
        let sent = server.requests().dropFirst(before).filter { $0.method == "PUT" }.map(\.path)
        let added = Set(try Self.originFiles(fixture.origin)).subtracting(files).map { "/game/forest/" + $0 }
        #expect(
            Set(sent) == Set(added + ["/game/forest/metadata/root.json", "/game/forest/metadata/timestamp.json"]),
            "only the new files (and the two files that change in place)")
        let firstBytes = firstReport["bytesUploaded"] as? Int ?? 0,
            secondBytes = secondReport["bytesUploaded"] as? Int ?? 0
        #expect(
            secondBytes * 2 < firstBytes,
            "the second build's upload (\(secondBytes) B) is a fraction of the first's (\(firstBytes) B)")
        print(
            "upload figures: first build \(firstReport["requests"] ?? 0) requests, \(firstBytes) B; "
                + "second build \(secondReport["requests"] ?? 0) requests, \(secondBytes) B")
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0 && install.currentBuild() == "2")

        // A store that refuses timestamp.json stops the upload before it: players still see build 2 whole;
        // the next run sends only what the first did not.
        try fixture.publish(try PruneTests.thirdBuild(fixture), id: "3")
        server.deny("forest/metadata/timestamp.json")
        let stopped = try upload([])
        #expect(stopped.status == 64 && stopped.stdout.contains("AccessDenied"), "\(stopped.stdout)")
        let unchanged = try CLI.run(["sync", "--install", install.root])
        #expect(
            unchanged.status == 0 && !unchanged.stdout.contains("build 3"),
            "players still see build 2: \(unchanged.stdout)")
        server.deny(nil)
        let mark = server.requests().count
        let resumed = try upload([])
        #expect(resumed.status == 0, "\(resumed.stdout)")
        let resent = server.requests().dropFirst(mark).filter { $0.method == "PUT" }.map(\.path)
        #expect(
            Set(resent) == ["/game/forest/metadata/root.json", "/game/forest/metadata/timestamp.json"],
            "the resumed upload sends only the files that change in place: \(resent)")
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0 && install.currentBuild() == "3")

        // Prune with the bucket: the first run unlists builds 1 and 2 and uploads that, but removes nothing they
        // need, since the bucket listed them until then; the next removes their files from the bucket too.
        let prune =
            [
                "repo", "prune", "--origin", fixture.origin, "--keep", "1", "--grace", "0", "--bucket",
                "s3://game/forest", "--endpoint", server.endpoint, "--json"
            ] + keys
        let unlisting = try CLI.run(prune, environment: server.credentials)
        #expect(unlisting.status == 0, "\(unlisting.stdout) \(unlisting.stderr)")
        #expect(
            ((try Self.json(unlisting.stdout))["removed"] as? [[String: Any]] ?? []).allSatisfy {
                !(($0["path"] as? String) ?? "").hasPrefix("objects/")
            }, "the bucket listed builds 1 and 2 until this run")
        let pruned = try CLI.run(prune, environment: server.credentials)
        #expect(pruned.status == 0, "\(pruned.stdout) \(pruned.stderr)")
        let removed = ((try Self.json(pruned.stdout))["removed"] as? [[String: Any]] ?? []).compactMap {
            $0["path"] as? String
        }
        let removedObjects = removed.filter { $0.hasPrefix("objects/") }
        #expect(!removedObjects.isEmpty)
        for path in removedObjects.prefix(3) {
            #expect(
                try Self.headers(server, "forest/" + path).hasPrefix("http/1.1 404"), "\(path) is gone from the bucket")
        }
        let fresh = try fixture.makeInstall("fresh", remotes: ["\(server.endpoint)/game/forest"])
        let sync = try CLI.run(["sync", "--install", fresh.root])
        #expect(sync.status == 0, "\(sync.stderr)")
        #expect(try CLI.run(["apply", "--install", fresh.root]).status == 0 && fresh.currentBuild() == "3")
    }

    @Test(
        "upload refuses an origin folder that lacks a file a listed build needs, and bad credentials, before anything is sent"
    )
    func refusals() throws {
        let fixture = try Fixture()
        let server = try S3Server()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.002), id: "1")
        var wrong = server.credentials
        wrong["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
        let denied = try CLI.run(
            ["upload", fixture.origin, "s3://game/forest", "--endpoint", server.endpoint], environment: wrong)
        #expect(
            denied.status == 64 && denied.stderr.contains("SignatureDoesNotMatch")
                && denied.stderr.contains("AWS_SECRET_ACCESS_KEY"),
            "\(denied.stderr)")
        let object = try #require(try Self.originFiles(fixture.origin).first { $0.hasPrefix("objects/") })
        try FileManager.default.removeItem(atPath: fixture.origin + "/" + object)
        let incomplete = try CLI.run(
            ["upload", fixture.origin, "s3://game/forest", "--endpoint", server.endpoint],
            environment: server.credentials)
        #expect(incomplete.status == 65 && incomplete.stderr.contains(object), "\(incomplete.stderr)")
        #expect(
            !server.requests().contains { $0.method == "PUT" && $0.path.hasPrefix("/game/forest/") }, "nothing was sent"
        )
        try FileManager.default.removeItem(atPath: fixture.origin)

        // An origin folder older than what the bucket serves (a restored backup) is refused, not uploaded over it.
        let other = try Fixture()
        try other.publish(try other.sampleBuild(1, scale: 0.002), id: "1")
        try FileManager.default.copyItem(atPath: other.origin, toPath: other.directory + "/backup")
        try other.publish(try other.sampleBuild(2, scale: 0.002), id: "2")
        let newer = try CLI.run(
            ["upload", other.origin, "s3://game/other", "--endpoint", server.endpoint], environment: server.credentials)
        #expect(newer.status == 0, "\(newer.stderr)")
        let stale = try CLI.run(
            ["upload", other.directory + "/backup", "s3://game/other", "--endpoint", server.endpoint],
            environment: server.credentials)
        #expect(stale.status == 65 && stale.stderr.contains("serves timestamp version"), "\(stale.stderr)")

        let none = try CLI.run(
            ["upload", other.origin, "s3://game/forest", "--endpoint", server.endpoint],
            environment: ["AWS_ACCESS_KEY_ID": "", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"])
        #expect(none.status == 64 && none.stderr.contains("no S3 credentials"), "\(none.stderr)")
    }
}
