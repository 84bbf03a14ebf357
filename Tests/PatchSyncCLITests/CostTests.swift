import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// What an up-to-date install costs: the promise that a sync finding nothing to do, `status` and
/// `bundles` read no manifest (their cost does not grow with the number of files). The kept manifests
/// are removed to prove it: a command that needed one would fetch it from the origin (seen in nginx's
/// log) or fail.
@Suite("Cost that follows the change", .tags(.cli), .serialized)
struct CostTests {
    @Test(
        "an up-to-date sync, status and bundles read no manifest: with the kept manifests gone, nothing is fetched but metadata and all three answer"
    )
    func upToDateReadsNoManifest() async throws {
        let fixture = try Fixture()
        try fixture.publish(
            try fixture.sampleBuild(1, scale: 0.005), id: "1",
            bundles: [.init(name: "base", required: true, priority: 0, paths: ["**"])])
        let nginx = try NginxOrigin(root: fixture.origin)
        let install = try fixture.makeInstall(remotes: [nginx.url])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        let manifests = install.root + "/.patchsync/manifests"
        for name in try FileManager.default.contentsOfDirectory(atPath: manifests) {
            try FileManager.default.removeItem(atPath: manifests + "/" + name)
        }
        let before = nginx.requests().count
        let sync = try CLI.run(["sync", "--install", install.root, "--json"])
        #expect(sync.status == 0, "\(sync.stderr)")
        let report = try #require(Refetch.lines(sync.stdout).last)
        #expect(report["outcome"] as? String == "upToDate", "\(report)")
        let fetched = nginx.requests().dropFirst(before).map(\.path)
        #expect(
            fetched.allSatisfy { $0.hasPrefix("/metadata/") },
            "an up-to-date sync fetched more than metadata: \(fetched)")
        let bundles = try #require(Refetch.lines(sync.stdout).first { $0["event"] as? String == "bundles" })
        #expect(
            (bundles["bundles"] as? [String: Any])?["playable"] as? Bool == true,
            "the bundles event comes from the install state: \(bundles)")

        let status = try CLI.run(["status", "--install", install.root, "--json"])
        #expect(status.status == 0, "\(status.stderr)")
        let facts = try #require(Refetch.lines(status.stdout).last)
        let entries = (facts["bundles"] as? [String: Any])?["bundles"] as? [[String: Any]]
        #expect(
            entries?.first?["state"] as? String == "live", "status shows the live bundles without a manifest: \(facts)")
        #expect((entries?.first?["bytes"] as? NSNumber)?.int64Value ?? 0 > 0)
        let list = try CLI.run(["bundles", "--install", install.root, "--json"])
        #expect(list.status == 0 && list.stdout.contains("\"live\""), "\(list.stdout) \(list.stderr)")
    }
}
