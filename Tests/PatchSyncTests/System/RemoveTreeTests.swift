import Foundation
import Testing

@testable import PatchSync

/// Deleting a tree (trash, an old staging, a retired build) removes everything in it, whatever its names,
/// and nothing outside it.
@Suite("Removing a tree", .tags(.small))
struct RemoveTreeTests {
    @Test(
        "a tree holding a name that is not UTF-8, a read-only folder and a link out is removed whole; the link's target stays"
    )
    func removesEverythingAndNothingOutside() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("remove-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: base) }
        let tree = base + "/trash/2.0-1", outside = base + "/player"
        try FileManager.default.createDirectory(atPath: tree + "/data/locked", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: outside + "/save"))
        // "caf\xE9.txt": Latin-1, as an old archive tool might have written it.
        let latin1: [CChar] =
            Array((tree + "/data/caf").utf8CString.dropLast()) + [CChar(bitPattern: 0xE9)] + Array(".txt".utf8CString)
        let fd = open(latin1, O_WRONLY | O_CREAT | O_EXCL, 0o444)
        #expect(fd >= 0)
        close(fd)
        try Data("x".utf8).write(to: URL(fileURLWithPath: tree + "/data/locked/file"))
        chmod(tree + "/data/locked", 0o555)
        try FileManager.default.createSymbolicLink(atPath: tree + "/data/out", withDestinationPath: outside)

        try FileSystem.removeTree(base + "/trash")
        #expect(!FileManager.default.fileExists(atPath: base + "/trash"))
        #expect(try String(contentsOfFile: outside + "/save", encoding: .utf8) == "keep")
    }

    @Test(
        "the staging sweep compares names by their bytes: an NFD twin of a kept NFC name and a name that is not UTF-8 are removed; the kept ones stay"
    )
    func sweepByBytes() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("sweep-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: base) }
        try FileManager.default.createDirectory(atPath: base + "/data", withIntermediateDirectories: true)
        let nfc = "data/caf\u{E9}", nfd = "data/cafe\u{301}"
        try Data("kept".utf8).write(to: URL(fileURLWithPath: base + "/" + nfc))
        try FileManager.default.createSymbolicLink(atPath: base + "/" + nfd, withDestinationPath: "/")
        let latin1: [CChar] = Array((base + "/data/x").utf8CString.dropLast()) + [CChar(bitPattern: 0xE9), 0]
        close(open(latin1, O_WRONLY | O_CREAT | O_EXCL, 0o644))
        let removed = try TreeRoot(base).removeAll(except: ["data", nfc])
        #expect(removed.count == 2)
        let left = try FileDescriptor(path: base + "/data", flags: O_RDONLY | O_DIRECTORY).rawNames()
        #expect(left == [Array("caf\u{E9}".utf8CString)])
    }

    @Test(
        "a download's own file: a hard link to another file or a FIFO at its name is replaced, never written through or waited on"
    )
    func ownFileReplacesHardLinksAndFIFOs() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("own-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        try Data("the player's file".utf8).write(to: URL(fileURLWithPath: base + "/bashrc"))
        #expect(link(base + "/bashrc", base + "/pack") == 0)
        let file = try FileDescriptor.ownFile(base + "/pack", flags: O_WRONLY | O_CREAT | O_TRUNC)
        try file.write(Array("new".utf8))
        #expect(try String(contentsOfFile: base + "/bashrc", encoding: .utf8) == "the player's file")
        #expect(mkfifo(base + "/fifo", 0o600) == 0)
        _ = try FileDescriptor.ownFile(base + "/fifo", flags: O_WRONLY | O_CREAT | O_APPEND)
        var st = stat()
        #expect(lstat(base + "/fifo", &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG)
    }
}
