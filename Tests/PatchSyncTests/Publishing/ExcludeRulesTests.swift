import Foundation
import Testing

@testable import PatchSync

/// What `publish --exclude` leaves out of a build folder.
@Suite("Excluding paths from a build", .tags(.small))
struct ExcludeRulesTests {
    @Test("a glob without a slash matches a name at any depth; one with a slash matches the path from the top")
    func matching() throws {
        let rules = try ExcludeRules(["*.pdb", "Thumbs.db", "tools/**", "/Saved", "data/*.tmp"])
        for path in [
            "game.pdb", "bin/x64/game.pdb", "a/Thumbs.db", "tools/cook.exe", "tools/a/b", "Saved", "data/x.tmp"
        ] {
            #expect(rules.excludes(path), "\(path) is left out")
        }
        for path in ["game.pdb.txt", "pdb", "mytools/cook.exe", "a/Saved", "data/sub/x.tmp", "Thumbs.dbx", "game.exe"] {
            #expect(!rules.excludes(path), "\(path) is kept")
        }
        #expect(!ExcludeRules.none.excludes("anything"))
        // A trailing slash: folders only; `./` anchors; a byte-order mark is no part of the glob.
        let more = try ExcludeRules(["Intermediate/", "./Saved", "\u{FEFF}*.log", "**/Cache"])
        #expect(more.excludes("a/Intermediate", isFolder: true) && !more.excludes("a/Intermediate"))
        #expect(more.excludes("Saved") && !more.excludes("a/Saved"))
        #expect(more.excludes("x/run.log"))
        #expect(more.excludes("Cache", isFolder: true) && more.excludes("a/b/Cache", isFolder: true))
        #expect(!more.excludes("NotCache", isFolder: true) && !more.excludes("a/MyCache", isFolder: true))
        #expect(more.match("x/run.log", isFolder: false) == "\u{FEFF}*.log", "the glob as given")
    }

    @Test("an empty glob, or one that matches every path, is refused: nothing or everything would be left out")
    func emptyRefused() {
        for glob in ["", "  ", "/", "*", "**", "/**", "**/*", "./", "*/"] {
            #expect(throws: PatchSyncError.self, "\(glob)") { try ExcludeRules([glob]) }
        }
    }

    @Test("regression: `**/` stands for whole folders: `**/Saved` leaves out a/Saved, never NotSaved or a/MySaved")
    func doubleStarFolders() {
        #expect(Glob.matches("**/Saved", "Saved") && Glob.matches("**/Saved", "a/b/Saved"))
        #expect(!Glob.matches("**/Saved", "NotSaved") && !Glob.matches("**/Saved", "a/MySaved"))
        #expect(Glob.matches("a/**/b", "a/b") && Glob.matches("a/**/b", "a/x/y/b") && !Glob.matches("a/**/b", "a/xb"))
        #expect(Glob.matches("tools/**", "tools/a/b") && Glob.matches("**.ogg", "music/a.ogg"))
    }

    @Test("a file of globs: one a line, blank lines and # comments skipped")
    func fileOfGlobs() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("exclude-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data("\u{FEFF}# debug symbols\n*.pdb\n\n  tools/**  \r\n#*.exe\n".utf8).write(
            to: URL(fileURLWithPath: path))
        #expect(try ExcludeRules.globs(inFile: path) == ["*.pdb", "tools/**"])
        #expect(throws: PatchSyncError.self) { try ExcludeRules.globs(inFile: path + ".missing") }
    }

    @Test(
        "the scan leaves out what matches, a folder whole (listed with a slash); a folder left empty by it is not published"
    )
    func scan() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("scan-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        for path in ["game.exe", "game.pdb", "tools/cook/cook.exe", "symbols/a.pdb", "data/map.bin"] {
            let full = root + "/" + path
            try FileManager.default.createDirectory(
                atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(path.utf8).write(to: URL(fileURLWithPath: full))
        }
        let folder = try BuildFolder.scan(root, exclude: try ExcludeRules(["*.pdb", "tools"]))
        #expect(folder.files == ["data/map.bin", "game.exe"])
        #expect(folder.excluded == ["game.pdb", "symbols/a.pdb", "tools/"])
        #expect(folder.emptyFolders.isEmpty, "symbols/ held only excluded files: \(folder.emptyFolders)")
        #expect(folder.usedGlobs == ["*.pdb", "tools"])
        // A kept link to what is left out would dangle on players' machines: refused, naming both.
        try FileManager.default.createSymbolicLink(atPath: root + "/cook", withDestinationPath: "tools/cook/cook.exe")
        let refusal = #expect(throws: PatchSyncError.self) {
            try BuildFolder.scan(root, exclude: try ExcludeRules(["*.pdb", "tools"]))
        }
        #expect(refusal?.message.contains("cook") == true && refusal?.message.contains("dangling") == true)
        #expect(try BuildFolder.scan(root, exclude: try ExcludeRules(["*.pdb", "tools", "cook"])).links.isEmpty)
        // Exclusions that leave nothing are refused.
        #expect(throws: PatchSyncError.self) {
            try BuildFolder.scan(root, exclude: try ExcludeRules(["*.pdb", "tools", "cook", "*.exe", "data"]))
        }
    }

    @Test("a publisher name or description with a line break or control character, empty, or over 1 KiB is refused")
    func noteChecks() throws {
        try PublishNote.check(by: "ci-runner-7", description: "Winter event: lobby crash fixed")
        try PublishNote.check(by: nil, description: nil)
        for (name, text) in [
            ("a\nb", nil), (nil, "x\u{1b}[31m"), ("  ", nil), (nil, String(repeating: "é", count: 600)),
            (nil, "evil\u{202E}gnp.exe"), ("a\u{2028}b", nil)
        ] {
            #expect(throws: PatchSyncError.self) { try PublishNote.check(by: name, description: text) }
        }
    }
}
