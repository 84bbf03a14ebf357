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

    @Test(
        "diff of an origin build and the next build folder predicts within 2% what a player on that build fetches once it is published: the delta pack publish writes, to the byte, and the chunks of the other files"
    )
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
        #expect(
            !byDelta.isEmpty && byDelta.count == sync.filesPatched,
            "\(byDelta.count) files by delta, \(sync.filesPatched) patched")
        #expect(
            byDelta.reduce(Int64(0)) { $0 + $1.downloadBytes } == pack.bytes,
            "the pack diff measured is the one publish wrote")
        let total = predicted.total.downloadBytes
        #expect(total == fetched, "diff plans as the sync does: it predicted \(total), the sync fetched \(fetched)")
        // And with the manifest (its delta) and the signed metadata: everything the sync downloaded.
        let all = predicted.allDownloadBytes, received = sync.bytesReceived
        #expect(predicted.metadataBytes != nil)
        #expect(
            abs(Double(all - received)) <= 0.02 * Double(received),
            "diff predicted \(all) in all, the sync received \(received)")
        #expect(fromFolder.total.downloadBytes == total, "a build folder OLD predicts the same patch")
        // Without the prediction (chunks only), diff is far off.
        #expect(chunksOnly.files.allSatisfy { $0.route != .delta })
        #expect(
            abs(Double(chunksOnly.total.downloadBytes - fetched)) > 0.02 * Double(fetched),
            "chunks only: \(chunksOnly.total.downloadBytes), the sync fetched \(fetched)")
        #expect(try CLI.run(["diff", build1, build2, "--delta-sources=-1"]).status == 64)
    }

    @Test(
        "regression: diff from an install plans as its sync does, to the byte: content a kept build holds and a renamed file cost nothing (diff counted reuse from OLD's build alone: 2.38 times what the sync fetched)"
    )
    func plansWithKeptBuilds() throws {
        let fixture = try Fixture()
        let build1 = try fixture.sampleBuild(1, scale: 0.05), build2 = fixture.directory + "/build-2",
            build3 = fixture.directory + "/build-3"
        // Build 2 drops a level build 1 had; build 3 brings it back under a new name, and adds a file of new bytes.
        try FileManager.default.copyItem(atPath: build1, toPath: build2)
        let level = "levels/level_1.map"
        try FileManager.default.removeItem(atPath: build2 + "/" + level)
        try Data((0..<400_000).map { UInt8(truncatingIfNeeded: $0 &* 31 >> 2) }).write(
            to: URL(fileURLWithPath: build2 + "/new-in-2.bin"))
        try FileManager.default.copyItem(atPath: build2, toPath: build3)
        try FileManager.default.copyItem(
            atPath: build1 + "/" + level, toPath: build3 + "/levels/level_1_remastered.map")
        try Data((0..<300_000).map { UInt8(truncatingIfNeeded: ($0 &* 2654435761) >> 11) }).write(
            to: URL(fileURLWithPath: build3 + "/new-in-3.bin"))
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        for (id, build) in [("1", build1), ("2", build2)] {
            try fixture.publish(build, id: id, deltaSources: 0)
            #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
            #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        }
        try fixture.publish(build3, id: "3", deltaSources: 0)
        let predicted = try Self.decode(
            PatchDiff.self,
            try CLI.run(["diff", install.root, fixture.fileRemote + "#3", "--root", fixture.rootMetadata, "--json"]))
        let fromBuild = try Self.decode(
            PatchDiff.self,
            try CLI.run([
                "diff", fixture.fileRemote + "#2", fixture.fileRemote + "#3", "--root", fixture.rootMetadata, "--json"
            ]))
        let sync = try Self.decode(SyncReport.self, try CLI.run(["sync", "--install", install.root, "--json"]))
        let fetched = sync.deltaBytes + sync.bytesPlanned
        #expect(
            predicted.total.downloadBytes == fetched,
            "diff from the install predicted \(predicted.total.downloadBytes), the sync fetched \(fetched)")
        #expect(
            predicted.files.first { $0.path == "levels/level_1_remastered.map" }?.route == .link,
            "build 1, kept for rollback, holds the level")
        #expect(predicted.files.filter { $0.route == .link }.count + predicted.total.filesUnchanged == sync.filesLinked)
        let linkedBytes = predicted.files.filter { $0.route == .link }.reduce(Int64(0)) { $0 + $1.size }
        let unchangedBytes = try Self.unchangedBytes(predicted, build3)
        #expect(
            predicted.total.writtenBytes == sync.buildBytes - linkedBytes - unchangedBytes,
            "staging writes what no link gives")
        // A player holding build 2 alone fetches the level too: what the install's kept build saves.
        #expect(
            fromBuild.total.downloadBytes > fetched,
            "from build 2 alone: \(fromBuild.total.downloadBytes), with build 1 kept: \(fetched)")
    }

    /// Bytes of the files of NEW (`folder`) that the diff counts unchanged: every file it lists no cost for.
    static func unchangedBytes(_ diff: PatchDiff, _ folder: String) throws -> Int64 {
        let costed = Set(diff.files.map(\.path))
        let all = try FileManager.default.subpathsOfDirectory(atPath: folder)
        return try all.filter { !costed.contains($0) }.reduce(Int64(0)) { sum, path in
            let attributes = try FileManager.default.attributesOfItem(atPath: folder + "/" + path)
            return attributes[.type] as? FileAttributeType == .typeRegular
                ? sum + ((attributes[.size] as? Int64) ?? 0) : sum
        }
    }
}
