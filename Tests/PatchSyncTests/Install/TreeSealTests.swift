import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("The seal of a tree's folders")
struct TreeSealTests {
    static func makeTree(_ fixture: Fixture) throws -> String {
        let root = fixture.directory + "/tree"
        try FileManager.default.createDirectory(atPath: root + "/a/b", withIntermediateDirectories: true)
        for path in ["top", "a/one", "a/b/two"] {
            try Data(path.utf8).write(to: URL(fileURLWithPath: root + "/" + path))
        }
        return root
    }

    @Test(
        "a tree moved to another folder keeps its folders' seal (a recycled build's is still its own) but not its whole seal (a ready tree must be where it was verified); a file added anywhere breaks both"
    )
    func movedTreeKeepsItsFolders() throws {
        let fixture = try Fixture()
        let root = try Self.makeTree(fixture)
        let seal = try #require(TreeSeal.of(root))
        #expect(TreeSeal.holds(seal, for: root))
        #expect(TreeSeal.foldersHold(seal, for: root))
        var before = stat(), after = stat()
        #expect(lstat(root, &before) == 0)
        try FileManager.default.createDirectory(
            atPath: fixture.directory + "/elsewhere", withIntermediateDirectories: true)
        let moved = fixture.directory + "/elsewhere/tree"
        #expect(rename(root, moved) == 0)
        #expect(lstat(moved, &after) == 0)
        #expect(seal.hasSuffix(":\(before.st_ctim.tv_sec).\(before.st_ctim.tv_nsec)"), "the root's change time")
        let changed = (before.st_ctim.tv_sec, before.st_ctim.tv_nsec) != (after.st_ctim.tv_sec, after.st_ctim.tv_nsec)
        #expect(TreeSeal.holds(seal, for: moved) == !changed, "the whole seal holds only while the root is unchanged")
        #expect(TreeSeal.foldersHold(seal, for: moved))
        try Data("new".utf8).write(to: URL(fileURLWithPath: moved + "/a/b/three"))
        #expect(!TreeSeal.foldersHold(seal, for: moved))
        #expect(!TreeSeal.holds(try #require(TreeSeal.of(moved)), for: root), "no tree there any more")
    }

    @Test(
        "a seal written before seals had a version (one hash of every folder's path, inode, times) still holds for its tree, and never vouches for a recycled folder"
    )
    func legacySeal() throws {
        let fixture = try Fixture()
        let root = try Self.makeTree(fixture)
        // The earlier formula, written out here apart from the code: each folder, depth first in name order.
        var entries: [String] = []
        func walk(_ relative: String) throws {
            let full = relative.isEmpty ? root : root + "/" + relative
            var st = stat()
            #expect(lstat(full, &st) == 0)
            entries.append(
                "\(relative)\t\(st.st_ino)\t\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)\t\(st.st_ctim.tv_sec).\(st.st_ctim.tv_nsec)"
            )
            for name in try FileManager.default.contentsOfDirectory(atPath: full).sorted() {
                var child = stat()
                if lstat(full + "/" + name, &child) == 0, (child.st_mode & S_IFMT) == S_IFDIR {
                    try walk(relative.isEmpty ? name : relative + "/" + name)
                }
            }
        }
        try walk("")
        let legacy = SHA256Digest.of(Data(entries.joined(separator: "\n").utf8)).hex
        #expect(TreeSeal.holds(legacy, for: root))
        #expect(!TreeSeal.foldersHold(legacy, for: root))
        try Data("new".utf8).write(to: URL(fileURLWithPath: root + "/a/three"))
        #expect(!TreeSeal.holds(legacy, for: root))
    }
}
