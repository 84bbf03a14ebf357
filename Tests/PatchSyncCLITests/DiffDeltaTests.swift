import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("patchsync diff predicts the delta route", .tags(.cli))
struct DiffDeltaTests {
    /// The last line of a command's `--json` output, decoded.
    static func decode<T: Decodable>(_ type: T.Type, _ result: CLI.Result) throws -> T {
        #expect(result.status == 0, "\(result.stderr)")
        let line = try #require(result.stdout.split(separator: "\n").last)
        return try JSONDecoder().decode(T.self, from: Data(line.utf8))
    }

    @Test("diff of an origin build and the next build folder predicts within 2% what a player on that build fetches once it is published: the delta pack publish writes, to the byte, and the chunks of the other files")
    func predictsWhatTheSyncFetches() throws {
        let fixture = try Fixture()
        let build1 = try fixture.sampleBuild(1, scale: 0.05), build2 = try fixture.sampleBuild(2, scale: 0.05)
        try fixture.publish(build1, id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)

        // Before build 2 is published: the CI budget gate's question.
        let diff = ["diff", fixture.fileRemote + "#1", build2, "--root", fixture.rootMetadata, "--json"]
        let predicted = try Self.decode(PatchDiff.self, try CLI.run(diff))
        let chunksOnly = try Self.decode(PatchDiff.self, try CLI.run(diff + ["--delta-sources", "0"]))
        let fromFolder = try Self.decode(PatchDiff.self, try CLI.run(["diff", build1, build2, "--json"]))

        let published = try fixture.publish(build2, id: "2")
        let pack = try #require(published.deltas.first)
        let sync = try Self.decode(SyncReport.self, try CLI.run(["sync", "--install", install.root, "--json"]))
        // The content the player fetched: the pack and the chunks of the files it does not rebuild
        // (bytesReceived also counts the signed metadata and the manifest delta, which diff leaves out).
        let fetched = sync.deltaBytes + sync.bytesPlanned
        #expect(sync.filesPatched > 0 && sync.deltaBytes == pack.bytes)

        let byDelta = predicted.files.filter { $0.route == .delta }
        #expect(!byDelta.isEmpty && byDelta.count == sync.filesPatched, "\(byDelta.count) files by delta, \(sync.filesPatched) patched")
        #expect(byDelta.reduce(Int64(0)) { $0 + $1.downloadBytes } == pack.bytes, "the pack diff measured is the one publish wrote")
        let total = predicted.total.downloadBytes
        #expect(abs(Double(total - fetched)) <= 0.02 * Double(fetched), "diff predicted \(total), the sync fetched \(fetched)")
        // And with the manifest (its delta) and the signed metadata: everything the sync downloaded.
        let all = predicted.allDownloadBytes, received = sync.bytesReceived
        #expect(predicted.metadataBytes != nil)
        #expect(abs(Double(all - received)) <= 0.02 * Double(received), "diff predicted \(all) in all, the sync received \(received)")
        #expect(fromFolder.total.downloadBytes == total, "a build folder OLD predicts the same patch")
        // Without the prediction (chunks only), diff is far off.
        #expect(chunksOnly.files.allSatisfy { $0.route == .chunks })
        #expect(
            abs(Double(chunksOnly.total.downloadBytes - fetched)) > 0.02 * Double(fetched),
            "chunks only: \(chunksOnly.total.downloadBytes), the sync fetched \(fetched)")
        #expect(try CLI.run(["diff", build1, build2, "--delta-sources=-1"]).status == 64)
    }
}
