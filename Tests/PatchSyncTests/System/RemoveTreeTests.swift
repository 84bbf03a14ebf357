import Foundation
import Testing

@testable import PatchSync

/// Deleting a tree (trash, an old staging, a retired build) removes everything in it, whatever its names,
/// and nothing outside it.
@Suite("Removing a tree", .tags(.small))
struct RemoveTreeTests {
    @Test("a tree holding a name that is not UTF-8, a read-only folder and a link out is removed whole; the link's target stays")
    func removesEverythingAndNothingOutside() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("remove-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: base) }
        let tree = base + "/trash/2.0-1", outside = base + "/player"
        try FileManager.default.createDirectory(atPath: tree + "/data/locked", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: outside + "/save"))
        // "caf\xE9.txt": Latin-1, as an old archive tool might have written it.
        let latin1: [CChar] = Array((tree + "/data/caf").utf8CString.dropLast()) + [CChar(bitPattern: 0xE9)] + Array(".txt".utf8CString)
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
}
