import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// A release engineer leaves debug symbols and tools out of a build, and says what a build is and who
/// published it; `repo status` shows it.
@Suite("Publishing with exclusions and a description", .tags(.cli))
struct PublishNoteTests {
    @Test(
        "--exclude and --exclude-from leave paths out (listed by --dry-run and the result); a player installs the build without them"
    )
    func exclusions() throws {
        let fixture = try Fixture()
        let build = fixture.directory + "/build"
        try BuildFolderCheckTests.write(
            build,
            [
                "game.exe": "exe", "game.pdb": "symbols", "bin/engine.pdb": "symbols", "tools/cook.exe": "cook",
                "data/map.bin": "map", "data/cache.tmp": "tmp"
            ])
        let globs = fixture.directory + "/exclude.txt"
        try Data("# scratch\ndata/*.tmp\n".utf8).write(to: URL(fileURLWithPath: globs))
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let args =
            [
                "publish", build, "--origin", fixture.origin, "--build-id", "1", "--exclude", "*.pdb",
                "--exclude", "tools/**", "--exclude-from", globs
            ] + keys
        let dry = try CLI.run(args + ["--dry-run", "--exclude", "*.nomatch"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("left out by --exclude: 4 path(s)"), "\(dry.stdout)")
        #expect(
            dry.stderr.contains("'*.nomatch' matched nothing"), "a glob that left nothing out is told: \(dry.stderr)")
        let published = try CLI.run(args + ["--json"])
        #expect(published.status == 0, "\(published.stderr)")
        let report = try lastJSON(published.stdout)
        #expect(
            report["excluded"] as? [String] == ["bin/engine.pdb", "data/cache.tmp", "game.pdb", "tools/cook.exe"],
            "\(report)")
        #expect(report["files"] as? Int == 2)
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.currentBuild() == "1")
        let live = try treeFacts(install.root + "/current").keys.sorted()
        #expect(live == ["data/map.bin", "game.exe"], "\(live)")
        // diff of the folder with the same exclusions agrees with what was published: nothing to fetch.
        let diff = try CLI.run(
            [
                "diff", fixture.fileRemote + "#1", build, "--root", fixture.origin + "/metadata/root.json", "--json",
                "--exclude", "*.pdb", "--exclude", "tools/**", "--exclude-from", globs
            ])
        let total = try #require(try lastJSON(diff.stdout)["total"] as? [String: Any], "\(diff.stderr)")
        #expect(
            total["filesAdded"] as? Int == 0 && total["filesRemoved"] as? Int == 0
                && total["filesChanged"] as? Int == 0, "\(total)")
        let bad = try CLI.run(["publish", build, "--origin", fixture.origin, "--build-id", "2", "--exclude", ""] + keys)
        #expect(bad.status == 64 && bad.stderr.contains("--exclude"), "\(bad.stderr)")
    }

    @Test(
        "--description and --publisher are signed with the build and shown by repo status (text and --json), kept when the build is promoted; a line break is refused before anything is written"
    )
    func description() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.001)
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let refused = try CLI.run(
            ["publish", build, "--origin", fixture.origin, "--build-id", "1", "--description", "two\nlines"] + keys)
        #expect(refused.status == 64 && refused.stderr.contains("line break"), "\(refused.stderr)")
        #expect(try CLI.run(["repo", "status", "--origin", fixture.origin]).stdout.contains("build(s)") == false)
        let published = try CLI.run(
            [
                "publish", build, "--origin", fixture.origin, "--build-id", "1", "--channel", "beta", "--new-channel",
                "--description", "Winter event, lobby crash fixed", "--publisher", "ci-runner-7"
            ] + keys)
        #expect(published.status == 0, "\(published.stderr)")
        let promoted = try CLI.run(
            ["repo", "promote", "1", "--from", "beta", "--to", "live", "--new-channel", "--origin", fixture.origin]
                + keys)
        #expect(promoted.status == 0, "\(promoted.stderr)")
        let status = try CLI.run(["repo", "status", "--origin", fixture.origin])
        let shown = status.stdout.components(separatedBy: "published ").count - 1
        #expect(shown == 2, "both channels' build 1 show it: \(status.stdout)")
        #expect(status.stdout.contains("by ci-runner-7: Winter event, lobby crash fixed"), "\(status.stdout)")
        let json = try CLI.run(["repo", "status", "--origin", fixture.origin, "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let channels = try #require(object["channels"] as? [[String: Any]])
        let notes = channels.compactMap { ($0["builds"] as? [[String: Any]])?.first?["published"] as? [String: Any] }
        #expect(notes.count == 2 && notes.allSatisfy { $0["by"] as? String == "ci-runner-7" }, "\(channels)")
        // Without --publisher, the host publishes.
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.001), id: "2")
        let host = try CLI.run(["repo", "status", "--origin", fixture.origin]).stdout
        #expect(host.contains("by \(ProcessInfo.processInfo.hostName)"), "\(host)")
    }
}
