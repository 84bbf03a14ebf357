import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("Promotion and server-side rollback", .tags(.cli))
struct ReleaseTests {
    /// Every file under the origin's objects/ folder.
    static func objects(_ origin: String) throws -> Set<String> {
        Set(
            try FileManager.default.subpathsOfDirectory(atPath: origin + "/objects").filter {
                var isDirectory: ObjCBool = false
                return FileManager.default.fileExists(atPath: origin + "/objects/" + $0, isDirectory: &isDirectory)
                    && !isDirectory.boolValue
            })
    }

    @Test(
        "repo promote lists a beta build on live without new content objects; repo rollback puts the previous build back as a new sequence, and the player's status says why"
    )
    func promoteAndRollback() throws {
        let fixture = try Fixture()
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let repo = ["--origin", fixture.origin]
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1.0", channel: "beta")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let none = try CLI.run(["sync", "--install", install.root])
        #expect(none.status == 69 && none.stderr.contains("no build"), "live lists nothing yet: \(none.stderr)")

        var before = try Self.objects(fixture.origin)
        let promote = try CLI.run(["repo", "promote", "1.0", "--from", "beta", "--to", "live", "--json"] + repo + keys)
        #expect(promote.status == 0, "\(promote.stderr)")
        #expect(try Self.objects(fixture.origin) == before, "a first promotion writes no object")
        let again = try CLI.run(["repo", "promote", "1.0", "--from", "beta", "--to", "live"] + repo + keys)
        #expect(again.status == 0 && again.stdout.contains("already the newest"), "\(again.stdout)")
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.currentBuild() == "1.0")

        try fixture.publish(try fixture.sampleBuild(2, scale: 0.003), id: "1.1", channel: "beta")
        before = try Self.objects(fixture.origin)
        #expect(try CLI.run(["repo", "promote", "1.1", "--from", "beta", "--to", "live"] + repo + keys).status == 0)
        let target = try #require(try Repository.load(origin: fixture.origin).targetFiles["manifests/live/1.1.json.gz"])
        #expect(target.custom?.promotedFrom == "beta" && target.custom?.sequence == 2)
        let manifestDeltas = Set(
            (target.custom?.manifestDeltas ?? []).map {
                SHA256Digest(hex: $0.object).map { OriginLayout.object($0) } ?? "?"
            })
        #expect(
            try Self.objects(fixture.origin).subtracting(before).map { "objects/" + $0 }.allSatisfy(
                manifestDeltas.contains),
            "only manifest deltas are new: no content object")
        let update = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(update.status == 0, "\(update.stderr)")
        let result = try #require(update.stdout.split(separator: "\n").last.map { Data($0.utf8) })
        let patched = (try JSONSerialization.jsonObject(with: result) as? [String: Any])?["filesPatched"] as? Int ?? 0
        #expect(patched > 0, "the beta delta pack from 1.0 is used on live: \(update.stdout.suffix(400))")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.currentBuild() == "1.1")

        let rollback = try CLI.run(
            ["repo", "rollback", "--channel", "live", "--reason", "crash on start"] + repo + keys)
        #expect(rollback.status == 0, "\(rollback.stderr)")
        #expect(rollback.stdout.contains("back on build 1.0 (sequence 3)"), "\(rollback.stdout)")
        let back = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(back.status == 0, "\(back.stderr)")
        let backReport = try lastJSON(back.stdout)
        let note = backReport["rollback"] as? [String: Any]
        #expect(note?["from"] as? String == "1.1" && note?["reason"] as? String == "crash on start", "\(backReport)")
        // Build 1.0 is still in builds/ (kept for rollback): every file comes from there, nothing is fetched.
        #expect(
            backReport["chunksFetched"] as? Int == 0 && backReport["bytesPlanned"] as? Int == 0
                && backReport["filesPatched"] as? Int == 0,
            "a publisher rollback to a build kept on disk fetches no content: \(backReport)")
        let status = try CLI.run(["status", "--install", install.root])
        #expect(
            status.stdout.contains("(the publisher rolled the channel back from 1.1: crash on start)"),
            "\(status.stdout)")
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        #expect(install.currentBuild() == "1.0")
        #expect(try install.status().currentRollback?.reason == "crash on start")

        let twice = try CLI.run(["repo", "rollback", "--channel", "live"] + repo + keys)
        #expect(
            twice.status == 64 && twice.stderr.contains("no earlier build"),
            "1.1 was left by a rollback: \(twice.stderr)")
        // A later bad build rolled back too: neither it nor 1.1 ever comes back by default.
        try fixture.publish(try fixture.sampleBuild(3, scale: 0.003), id: "1.2")
        #expect(
            try CLI.run(["repo", "rollback", "--channel", "live"] + repo + keys).stdout.contains("back on build 1.0"))
        let thrice = try CLI.run(["repo", "rollback", "--channel", "live"] + repo + keys)
        #expect(thrice.status == 64 && thrice.stderr.contains("no earlier build"), "\(thrice.stderr) \(thrice.stdout)")
        let repoStatus = try CLI.run(["repo", "status"] + repo)
        #expect(
            repoStatus.stdout.contains("* 1.0  sequence 5") && repoStatus.stdout.contains("rolled back from 1.2"),
            "\(repoStatus.stdout)")
        let wrong = try CLI.run(["repo", "promote", "9.9", "--from", "beta", "--to", "live"] + repo + keys)
        #expect(wrong.status == 64 && wrong.stderr.contains("lists no build 9.9"), "\(wrong.stderr)")
    }
}
