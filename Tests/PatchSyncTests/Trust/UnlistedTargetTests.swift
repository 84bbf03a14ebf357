import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// Players and publisher read a channel one way (``ChannelListing``); `repo check` names a signed target
/// that reading skips, since no command lists, shows or prunes it.
@Suite("Targets no channel lists", .tags(.small))
struct UnlistedTargetTests {
    @Test(
        "a build's target at another path is named by repo check (the build at its own path is not), and repo prune signs targets again without it"
    )
    func named() throws {
        let fixture = try Fixture.published(scale: 0.001)
        var repo = try Repository.load(origin: fixture.origin)
        #expect(repo.unlistedTargets().isEmpty)
        let (path, file) = try #require(repo.targetFiles.first { $0.value.custom?.buildId == "1" })
        var targets = repo.targetFiles
        targets["manifests/live/copy-of-1.json.gz"] = file
        try repo.commit(targets: targets, signers: fixture.signers)
        let found = repo.listingProblems(now: Date(), late: 0).filter { $0.kind == .unlistedTarget }
        #expect(found.count == 1, "\(found)")
        #expect(found.first?.problem.contains("manifests/live/copy-of-1.json.gz") == true)
        #expect(ChannelListing(repo, channel: "live").builds.map(\.path) == [path], "players read the one at its path")
        let report = try Pruner(origin: fixture.origin, options: .init(keep: 64), signers: fixture.signers).run()
        #expect(report.unlisted == ["live/1"], "\(report.unlisted)")
        let pruned = try Repository.load(origin: fixture.origin)
        #expect(pruned.unlistedTargets().isEmpty)
        #expect(pruned.targetFiles[path] != nil, "the build itself stays listed")
    }
}
