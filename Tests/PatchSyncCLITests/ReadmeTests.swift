import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("The README's commands", .tags(.cli))
struct ReadmeTests {
    /// The first ```sh block under a `## heading` of README.md.
    static func block(under heading: String) throws -> String {
        let readme = try String(contentsOfFile: DiffCLITests.repoRoot + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "\n## ").first { $0.hasPrefix(heading) })
        let start = try #require(section.range(of: "```sh\n"))
        let end = try #require(section.range(of: "\n```", range: start.upperBound..<section.endIndex))
        return String(section[start.upperBound..<end.lowerBound])
    }

    @Test("the release engineer's, launcher integrator's and operator's commands run as written")
    func walkthrough() throws {
        let fixture = try Fixture()
        let work = fixture.directory + "/walkthrough"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let bucket = try S3Server()
        let environment = [
            "PATH": CLI.productsDirectory + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "KEYS": work + "/keys", "NEW": work + "/new-keys", "ORIGIN": work + "/origin", "GAME": work + "/game",
            "BUILD": try fixture.sampleBuild(1, scale: 0.005), "NEXT_BUILD": try fixture.sampleBuild(2, scale: 0.005),
            "BUCKET": "s3://\(bucket.bucket)/forest", "ENDPOINT": bucket.endpoint,
            // The player reads what the release engineer uploaded, without credentials.
            "REMOTE": "\(bucket.endpoint)/\(bucket.bucket)/forest", "GAME_EXE": "/bin/true"
        ].merging(bucket.credentials) { a, _ in a }
        for heading in ["For release engineers", "For launcher integrators", "For operators"] {
            let script = try Self.block(under: heading)
            if heading == "For launcher integrators" {  // the game ships the root it trusts
                try FileManager.default.copyItem(
                    atPath: work + "/origin/metadata/root.json", toPath: work + "/root.json")
            }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-e", "-c", script]
            process.environment = environment
            process.currentDirectoryURL = URL(fileURLWithPath: work)
            let err = Pipe()
            process.standardError = err
            process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            try process.run()
            let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(heading): \(stderr)")
        }
        #expect(FileManager.default.fileExists(atPath: work + "/patch.html"))
        #expect(try Install.open(at: work + "/game").currentBuild() == "1.4.2+873")
        let puts = bucket.requests().filter { $0.method == "PUT" && $0.path.hasPrefix("/game/forest/") }
        #expect(
            puts.last?.path == "/game/forest/metadata/timestamp.json", "the walkthrough uploaded, timestamp.json last")
    }

    @Test(
        "the release day's commands run as written (with a release time of tomorrow): preload published and uploaded, released by hand, the key in the bucket"
    )
    func releaseDay() throws {
        let fixture = try Fixture()
        let work = fixture.directory + "/release-day"
        try FileManager.default.createDirectory(atPath: work, withIntermediateDirectories: true)
        let bucket = try S3Server()
        let keys = work + "/keys", origin = work + "/origin"
        #expect(try CLI.run(["keygen", "--out", keys]).status == 0)
        #expect(
            try CLI.run([
                "repo", "init", "--origin", origin, "--root-key", keys + "/root.key", "--targets-key",
                keys + "/targets.key", "--online-key", keys + "/online.key"
            ]).status == 0)
        #expect(
            try CLI.run([
                "publish", try fixture.sampleBuild(1, scale: 0.005), "--origin", origin, "--build-id", "1.4",
                "--targets-key", keys + "/targets.key", "--online-key", keys + "/online.key"
            ]).status == 0)
        let readme = try String(contentsOfFile: DiffCLITests.repoRoot + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "### Release day").dropFirst().first)
        let start = try #require(section.range(of: "```sh\n"))
        let end = try #require(section.range(of: "\n```", range: start.upperBound..<section.endIndex))
        let tomorrow = TUFDate.format(Date(timeIntervalSinceNow: 86400))
        let script = String(section[start.upperBound..<end.lowerBound]).replacingOccurrences(
            of: "2026-12-01T17:00:00Z", with: tomorrow)
        let environment = [
            "PATH": CLI.productsDirectory + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "KEYS": keys, "ORIGIN": origin, "NEXT_BUILD": try fixture.sampleBuild(2, scale: 0.005),
            "BUCKET": "s3://\(bucket.bucket)/forest", "ENDPOINT": bucket.endpoint
        ].merging(bucket.credentials) { a, _ in a }
        let result = try CLI.runProgram(
            "/usr/bin/env", ["-i"] + environment.map { "\($0)=\($1)" } + ["/bin/sh", "-e", "-c", script])
        #expect(result.status == 0, "\(result.stdout) \(result.stderr)")
        let repo = try Repository.load(origin: origin)
        #expect(repo.isReleased(channel: "live", build: "1.5"))
        #expect(FileManager.default.fileExists(atPath: keys + "/content/live/1.5.key"))
        let puts = bucket.requests().filter { $0.method == "PUT" }.map(\.path)
        #expect(
            puts.contains { $0.hasPrefix("/game/forest/targets/releases/live/") && $0.hasSuffix(".1.5.key") }, "\(puts)"
        )
        #expect(puts.last == "/game/forest/metadata/timestamp.json")
    }

    @Test("shell completions and the man pages' source list every verb")
    func completionsAndManual() throws {
        let verbs = [
            "keygen", "repo", "rotate-root", "prune", "release", "publish", "upload", "diff", "init", "sync", "apply",
            "launch", "rollback", "verify", "status"
        ]
        for shell in ["bash", "zsh", "fish"] {
            let script = try CLI.run(["--generate-completion-script", shell])
            #expect(script.status == 0)
            for verb in verbs { #expect(script.stdout.contains(verb), "\(shell) completion lacks \(verb)") }
        }
        let dump = try CLI.run(["--experimental-dump-help"])  // what `make man` renders
        #expect(dump.status == 0)
        for verb in verbs {
            #expect(
                dump.stdout.contains("\"commandName\" : \"\(verb)\"")
                    || dump.stdout.contains("\"commandName\":\"\(verb)\""))
        }
    }
}
