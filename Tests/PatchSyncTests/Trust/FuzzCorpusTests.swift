import Foundation
import Testing

@_spi(Fuzzing) @testable import PatchSync

/// `make test` replays the fuzzers' corpus (Fuzz/Corpus/<target>: seeds, and every crash found and
/// fixed) through the same entry points the libFuzzer targets call: none may crash.
@Suite("Fuzz corpus replay", .tags(.small))
struct FuzzCorpusTests {
    static let corpus =
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path + "/Fuzz/Corpus"

    @Test(
        "every input of every fuzz target's corpus runs through its entry point",
        arguments: FuzzTargets.all.map(\.name))
    func replay(target: String) throws {
        let run = try #require(FuzzTargets.all.first { $0.name == target }?.run)
        let folder = Self.corpus + "/" + target
        let files = try FileManager.default.contentsOfDirectory(atPath: folder)
        #expect(files.count >= 2, "the \(target) corpus has no seeds")
        for file in files { run(try Data(contentsOf: URL(fileURLWithPath: folder + "/" + file))) }
    }

    @Test("the seeds are meaningful: metadata seeds parse and verify, manifest seeds decode")
    func seedsAreValid() throws {
        let metadata = Self.corpus + "/metadata"
        var roots = 0
        for file in try FileManager.default.contentsOfDirectory(atPath: metadata) where file.hasSuffix("root.json") {
            let data = try Data(contentsOf: URL(fileURLWithPath: metadata + "/" + file))
            let root = try Signed<RootMetadata>(parsing: data, name: file)
            try root.verify(role: try #require(root.signed.roles["root"]), keys: root.signed.keys, name: file)
            roots += 1
        }
        #expect(roots == 2, "one root written by PatchSync, one (rsa) by python-tuf")
        let manifests = Self.corpus + "/manifest"
        for file in try FileManager.default.contentsOfDirectory(atPath: manifests) {
            _ = try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: manifests + "/" + file)), what: file)
        }
    }
}
