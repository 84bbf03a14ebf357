import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Runs `patchsync ARGS…` with the clock `days` ahead (libfaketime's wrapper), as a repository a year on
/// would see it; stdout and stderr together in both fields.
func runLater(days: Int, _ arguments: [String]) throws -> CLI.Result {
    var result = try CLI.runProgram("/usr/bin/faketime", ["-f", "+\(days)d", CLI.executable] + arguments)
    result.stderr = result.stdout
    return result
}

@Suite("A repository over the years", .tags(.cli))
struct RepositoryLifecycleTests {
    @Test(
        "repo check exits 65 naming each role that expires within its window and the command that renews it; refresh and renew clear it; status lists roles and builds"
    )
    func checkAndRenew() throws {
        let fixture = try Fixture(now: Date(timeIntervalSinceNow: -440 * 86400))  // signed 440 days ago
        try fixture.publish(
            try fixture.sampleBuild(1, scale: 0.002), id: "1", now: Date(timeIntervalSinceNow: -440 * 86400))
        let keys = fixture.keyDirectory
        let check = { try CLI.run(["repo", "check", "--origin", fixture.origin, "--within", "30d"]) }
        var result = try check()
        #expect(result.status == 65, "\(result.stderr)")
        #expect(
            result.stderr.contains("targets (14") && result.stderr.contains("timestamp (expired)"), "\(result.stderr)")
        #expect(!result.stderr.contains("root ("), "root has 290 days left")
        #expect(result.stderr.contains("repo renew --origin \(fixture.origin) --targets-key"), "\(result.stderr)")

        let refresh = try CLI.run(["repo", "refresh", "--origin", fixture.origin, "--online-key", keys + "/online.key"])
        #expect(refresh.status == 0)
        #expect(
            refresh.stderr.contains("warning: targets.json of \(fixture.origin) expires in 14"), "\(refresh.stderr)")
        result = try check()
        #expect(result.status == 65 && !result.stderr.contains("timestamp"), "\(result.stderr)")

        let renew = try CLI.run([
            "repo", "renew", "--origin", fixture.origin, "--targets-key", keys + "/targets.key",
            "--online-key", keys + "/online.key"
        ])
        #expect(renew.status == 0, "\(renew.stderr)")
        result = try check()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            try CLI.run(["repo", "check", "--origin", fixture.origin, "--within", "300d"]).status == 65,
            "root (290 days left) is due within 300 days")

        let status = try CLI.run(["repo", "status", "--origin", fixture.origin, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        let roles = try #require(json["roles"] as? [[String: Any]])
        #expect(roles.map { $0["role"] as? String } == ["root", "targets", "snapshot", "timestamp"])
        #expect((roles[1]["daysLeft"] as? Double ?? 0) > 450, "targets renewed for 455 days")
        let channels = try #require(json["channels"] as? [[String: Any]])
        let build = try #require((channels.first?["builds"] as? [[String: Any]])?.first)
        #expect(channels.first?["channel"] as? String == "live" && build["buildId"] as? String == "1")
        #expect(build["current"] as? Bool == true && (build["size"] as? Int ?? 0) > 100_000)
    }

    @Test(
        "the defaults keep players updating for two years with a daily refresh and one renewal a year; without the renewal they are stranded"
    )
    func defaultsOverYears() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.002), id: "1")
        let keys = fixture.keyDirectory
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        let refresh = { (day: Int) throws -> CLI.Result in
            try runLater(
                days: day, ["repo", "refresh", "--origin", fixture.origin, "--online-key", keys + "/online.key"])
        }
        // A quiet year and a half: only the cron job runs. Targets (455 days) has expired: every sync fails,
        // and the cron job says so (65, naming the renewal) instead of passing as if all were well.
        let unrenewed = try refresh(470)
        #expect(unrenewed.status == 65 && unrenewed.stdout.contains("repo renew"), "\(unrenewed.stdout)")
        let stranded = try runLater(days: 470, ["sync", "--install", install.root])
        #expect(stranded.status == 65 && stranded.stderr.contains("expired"), "\(stranded.stderr)")

        // The same with the yearly renewal (day 365) of targets and root: still fine on day 470 and day 800.
        let renewed = try runLater(
            days: 365,
            [
                "repo", "renew", "--origin", fixture.origin, "--root-key", keys + "/root.key",
                "--targets-key", keys + "/targets.key", "--online-key", keys + "/online.key"
            ])
        #expect(renewed.status == 0, "\(renewed.stderr)")
        #expect(try refresh(470).status == 0)
        let later = try runLater(days: 470, ["sync", "--install", install.root])
        #expect(later.status == 0, "\(later.stderr)")
        #expect(
            try runLater(
                days: 730,
                [
                    "repo", "renew", "--origin", fixture.origin, "--root-key", keys + "/root.key",
                    "--targets-key", keys + "/targets.key", "--online-key", keys + "/online.key"
                ]
            ).status == 0)
        #expect(try refresh(800).status == 0)
        let twoYears = try runLater(days: 800, ["sync", "--install", install.root])
        #expect(twoYears.status == 0, "\(twoYears.stderr)")
    }
}
