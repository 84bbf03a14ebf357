import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// What a fast verify reads: a deployment's file records with their stat cache, a page at a time.
@Suite("A deployment's file records, read in pages", .tags(.small))
struct BuildFileRecordsTests {
    @Test(
        "every record of a deployment comes once, in path order, with its stat cache where there is one, across pages and past a page's end; another deployment's never"
    )
    func pages() throws {
        let fixture = try Fixture()
        let state = try StateStore(path: fixture.directory + "/state.db")
        let count = StateStore.filesPerPage * 2 + 7
        let files = (0..<count).map { i in
            StateStore.BuildFile(path: "d\(i % 13)/f\(i)", size: Int64(i), mode: 0o444, sha256: String(i))
        }
        try state.saveBuildFiles(build: "2", files)
        try state.saveBuildFiles(build: "1", [StateStore.BuildFile(path: "other", size: 1, mode: 0o444, sha256: "x")])
        var cached: [String: StateStore.FileStat] = [:]
        for file in files where file.size % 3 == 0 {
            cached[file.path] = StateStore.FileStat(size: file.size, modifiedNanoseconds: 5, inode: file.size)
        }
        try state.saveStatCache(build: "2", cached)
        var seen: [String] = []
        var withCache = 0
        let total = try state.forEachBuildFile(build: "2") { file, stat in
            seen.append(file.path)
            if let stat {
                withCache += 1
                #expect(stat == cached[file.path])
            }
        }
        #expect(total == count && seen.count == count)
        #expect(seen == files.map(\.path).sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }))
        #expect(withCache == cached.count)
        #expect(try state.forEachBuildFile(build: "3") { _, _ in } == 0)
    }
}
