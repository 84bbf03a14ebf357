import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// The path checks of a manifest against a reference written apart: a table of every path, exact and
/// case-folded, and every ancestor of every path looked up (the rule as the design states it).
@Suite("A manifest's paths: one entry each on any disk")
struct PathIndexTests {
    /// The reference: whether the files, links and folders are each listed once, none differs from another
    /// only in case, and no path has a file or a link (case-insensitively) as an ancestor.
    static func referenceAccepts(files: [String], links: [String], folders: [String]) -> Bool {
        let all = files + links + folders
        guard Set(all).count == all.count, Set(all.map { $0.lowercased() }).count == all.count else { return false }
        let leaves = Set((files + links).map { $0.lowercased() })
        for path in all {
            let parts = path.split(separator: "/").map(String.init)
            for depth in parts.indices.dropLast()
            where leaves.contains(parts[...depth].joined(separator: "/").lowercased()) {
                return false
            }
        }
        return true
    }

    static func accepts(files: [String], links: [String], folders: [String]) -> Bool {
        var (index, duplicate) = PathIndex.of(files: files)
        guard duplicate == nil else { return false }
        for link in links where !index.add(link, leaf: true) { return false }
        for folder in folders where !index.add(folder, leaf: false) { return false }
        return index.firstFileAsFolder() == nil
    }

    /// The failing set with paths removed one at a time while the verdicts still differ.
    static func shrink(_ files: [String], _ links: [String], _ folders: [String]) -> ([String], [String], [String]) {
        var current = (files, links, folders)
        func fails(_ c: ([String], [String], [String])) -> Bool {
            accepts(files: c.0, links: c.1, folders: c.2) != referenceAccepts(files: c.0, links: c.1, folders: c.2)
        }
        var shrunk = true
        while shrunk {
            shrunk = false
            let candidates =
                current.0.indices.map { i in
                    (current.0.enumerated().filter { $0.offset != i }.map(\.element), current.1, current.2)
                }
                + current.1.indices.map { i in
                    (current.0, current.1.enumerated().filter { $0.offset != i }.map(\.element), current.2)
                }
                + current.2.indices.map { i in
                    (current.0, current.1, current.2.enumerated().filter { $0.offset != i }.map(\.element))
                }
            if let smaller = candidates.first(where: fails) {
                current = smaller
                shrunk = true
            }
        }
        return current
    }

    @Test(
        "random sets of paths (upper and lower case, non-ASCII, files that are another's folder, duplicates; sorted or not) get the reference's verdict; the seed and the smallest failing set are printed"
    )
    func matchesTheReference() {
        let seed = UInt64(ProcessInfo.processInfo.environment["PATCHSYNC_PATHS_SEED"] ?? "") ?? 4242
        var random = SeededRandom(seed: seed)
        let names = ["a", "A", "b", "é", "É", "cafe\u{301}".precomposedStringWithCanonicalMapping, "x.txt", "X.TXT"]
        func path() -> String {
            (0..<Int.random(in: 1...3, using: &random)).map { _ in names.randomElement(using: &random)! }
                .joined(separator: "/")
        }
        var accepted = 0
        for round in 0..<4000 {
            let files = (0..<Int.random(in: 0...6, using: &random)).map { _ in path() }
            let sorted = Bool.random(using: &random) ? files.sorted { PathIndex.precedes($0, $1) } : files
            let links = (0..<Int.random(in: 0...2, using: &random)).map { _ in path() }
            let folders = (0..<Int.random(in: 0...2, using: &random)).map { _ in path() }
            let expected = Self.referenceAccepts(files: sorted, links: links, folders: folders)
            if expected { accepted += 1 }
            guard Self.accepts(files: sorted, links: links, folders: folders) == expected else {
                let (f, l, d) = Self.shrink(sorted, links, folders)
                Issue.record(
                    "seed \(seed) round \(round): smallest failing set: files \(f) links \(l) folders \(d) (the reference says \(Self.referenceAccepts(files: f, links: l, folders: d) ? "accept" : "refuse"))"
                )
                return
            }
        }
        #expect(accepted > 400 && accepted < 3600, "both verdicts are exercised: \(accepted) of 4000 accepted")
    }
}
