import Foundation
import Testing

@testable import PatchSync

@Suite("What a patch costs", .tags(.small))
struct PatchDiffTests {
    static func chunk(_ name: String, offset: Int64, length: Int, stored: Int) -> ChunkEntry {
        ChunkEntry(
            offset: offset, length: length, sha256: SHA256Digest.of(Data(name.utf8)), objectOffset: 0,
            objectLength: stored, codec: .zlib)
    }

    static func file(_ path: String, _ bundle: String, _ chunks: [ChunkEntry]) -> FileEntry {
        let size = chunks.reduce(Int64(0)) { $0 + Int64($1.length) }
        let sha = SHA256Digest.of(Data((path + chunks.map(\.sha256.hex).joined()).utf8))
        return FileEntry(path: path, size: size, mode: 0o644, sha256: sha, object: sha, bundle: bundle, chunks: chunks)
    }

    static func manifest(_ files: [FileEntry]) throws -> Manifest {
        Manifest(
            formatVersion: 1, buildId: try BuildID("x"), channel: .live, sequence: 1, chunking: .standard,
            bundles: [
                Bundle(name: "base", required: true, priority: 0, paths: ["**"]),
                Bundle(name: "maps", required: false, priority: 5, paths: ["maps/**"])
            ],
            files: files)
    }

    @Test("a hand-computed case: added, removed, changed and unchanged files, shared chunks counted once")
    func handComputed() throws {
        let a = Self.chunk("a", offset: 0, length: 1000, stored: 400)
        let b = Self.chunk("b", offset: 1000, length: 1000, stored: 500)
        let c = Self.chunk("c", offset: 0, length: 2000, stored: 900)
        let d = Self.chunk("d", offset: 0, length: 3000, stored: 3000)
        let old = try Self.manifest([
            Self.file("bin/game", "base", [a, b]), Self.file("maps/x.map", "maps", [c]),
            Self.file("gone.txt", "base", [Self.chunk("g", offset: 0, length: 10, stored: 10)])
        ])
        let b2 = Self.chunk("b2", offset: 1000, length: 1200, stored: 600)
        let new = try Self.manifest([
            Self.file("bin/game", "base", [a, b2]),  // changed: reuses a, downloads b2 (600)
            Self.file("maps/x.map", "maps", [c]),  // unchanged
            Self.file("maps/y.map", "maps", [d, Self.chunk("b2", offset: 3000, length: 1200, stored: 600)])
            // added: d (3000) new; b2 already counted for bin/game, so not downloaded twice
        ])
        let diff = PatchDiff(old: old, new: new, oldName: "1", newName: "2")
        #expect(
            diff.total
                == PatchDiff.Totals(
                    filesAdded: 1, filesRemoved: 1, filesChanged: 1, filesUnchanged: 1,
                    downloadBytes: 3600, writtenBytes: 2200 + 4200,
                    diskDeltaBytes: (2200 + 2000 + 4200) - (2000 + 2000 + 10)))
        #expect(diff.bundles["base"]?.downloadBytes == 600)
        #expect(diff.bundles["maps"]?.downloadBytes == 3000)
        #expect(diff.bundles["base"]?.filesRemoved == 1)
        let game = try #require(diff.files.first { $0.path == "bin/game" })
        #expect(game.reusedBytes == 1000 && game.newBytes == 1200 && game.downloadBytes == 600)
        #expect(diff.largest.first?.path == "maps/y.map")
        #expect(diff.removed == ["gone.txt"])
        #expect(diff.folders == ["bin": 600, "maps": 3000])
    }

    @Test("a fresh install downloads every distinct chunk once")
    func freshInstall() throws {
        let a = Self.chunk("a", offset: 0, length: 100, stored: 40)
        let new = try Self.manifest([Self.file("one", "base", [a]), Self.file("two", "base", [a])])
        let diff = PatchDiff(old: nil, new: new, oldName: "nothing", newName: "1")
        #expect(diff.total.downloadBytes == 40)
        #expect(diff.total.filesAdded == 2)
    }
}
