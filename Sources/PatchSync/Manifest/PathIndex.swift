import Foundation

/// The paths of a manifest's files, links and folders, checked to be one entry each on any disk: no path
/// twice, none that differs from another only in case, and no file or link where another path needs a
/// folder. The files' paths are looked up in their own table sorted bytewise (a binary manifest's order,
/// so it costs nothing there), and only paths that fold to something else (upper case, non-ASCII), links
/// and folders go into tables: a build of lower-case ASCII paths is checked without a table per path.
struct PathIndex {
    /// The files' paths, sorted bytewise.
    private let files: [String]
    /// The case-folded paths of the files that fold to another string, and of the links.
    private var foldedLeaves = Set<String>()
    /// The case-folded paths of the folders.
    private var foldedFolders = Set<String>()
    /// The links' and folders' paths.
    private var entries = Set<String>()

    /// Indexes `paths` (the files'); returns the first listed twice, or another that differs from one only
    /// in case, as `duplicate`.
    static func of(files paths: [String]) -> (PathIndex, duplicate: String?) {
        var sorted = true
        for i in paths.indices.dropFirst() where !precedes(paths[i - 1], paths[i]) {
            sorted = false
            break
        }
        var index = PathIndex(files: sorted ? paths : paths.sorted(by: precedes))
        for i in index.files.indices.dropFirst() where index.files[i - 1] == index.files[i] {
            return (index, index.files[i])
        }
        for path in index.files where folds(path) {
            let folded = PathRule.folded(path)
            guard index.foldedLeaves.insert(folded).inserted, folded == path || !index.hasFile(folded) else {
                return (index, path)
            }
        }
        return (index, nil)
    }

    private init(files: [String]) { self.files = files }

    /// Adds a link's (`leaf`) or a folder's path; false when it is listed already or differs from a path
    /// listed only in case.
    mutating func add(_ path: String, leaf: Bool) -> Bool {
        let folded = PathRule.folded(path)
        guard !hasFile(path), entries.insert(path).inserted, folded == path || !hasFile(folded),
            !foldedLeaves.contains(folded), !foldedFolders.contains(folded)
        else { return false }
        if leaf { foldedLeaves.insert(folded) } else { foldedFolders.insert(folded) }
        return true
    }

    /// The first path (of a file, link or folder) with an ancestor that is a file or a link (or differs
    /// from one only in case), with that ancestor; nil when there is none. Each folder is looked at once.
    func firstFileAsFolder() -> (path: String, ancestor: String)? {
        var checked = Set<String>()
        var lastParent: Substring?
        for path in files + entries.sorted() {
            let parent = path.lastIndex(of: "/").map { path[..<$0] }
            guard parent != lastParent else { continue }  // files come folder by folder
            lastParent = parent
            for ancestor in PathRule.ancestors(path).reversed() {
                guard checked.insert(ancestor).inserted else { break }  // it and the ones above it are checked
                let folded = PathRule.folded(ancestor)
                if hasFile(folded) || foldedLeaves.contains(folded) {
                    return (path, ancestor)
                }
            }
        }
        return nil
    }

    /// Whether a file has exactly `path` (binary search).
    private func hasFile(_ path: String) -> Bool {
        var low = 0, high = files.count
        while low < high {
            let middle = (low + high) / 2
            if Self.precedes(files[middle], path) { low = middle + 1 } else { high = middle }
        }
        return low < files.count && files[low] == path
    }

    /// Bytewise order of UTF-8 (a binary manifest's file order): one memcmp.
    static func precedes(_ a: String, _ b: String) -> Bool {
        var a = a, b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in
                let common = min(x.count, y.count)
                guard common > 0, let p = x.baseAddress, let q = y.baseAddress else { return x.count < y.count }
                let order = memcmp(p, q, common)
                return order != 0 ? order < 0 : x.count < y.count
            }
        }
    }

    /// Whether `path` may fold to another string (upper-case ASCII, or any non-ASCII byte).
    private static func folds(_ path: String) -> Bool {
        path.utf8.contains { $0 >= 0x80 || (0x41...0x5A).contains($0) }
    }
}
