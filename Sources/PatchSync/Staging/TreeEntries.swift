import Foundation

/// The empty folders and symbolic links of a staged build, made once its files are written (so no
/// file is ever written through a link): each folder made without following a link, each link made
/// with symlink(2) where anything else at its path is removed first.
enum TreeEntries {
    /// Places `manifest`'s folders and links under `directory`; returns their paths (whose parent
    /// folders the caller syncs).
    static func place(_ manifest: Manifest, in tree: TreeRoot) throws(PatchSyncError) -> [String] {
        var placed: [String] = []
        do {
            for folder in manifest.folders ?? [] {
                try tree.makeFolder(folder.path)
                placed.append(folder.path)
            }
            for link in manifest.links ?? [] {
                try tree.makeFolder(PathRule.split(link.path).folder)
                if let st = try tree.status(link.path) {
                    if (st.st_mode & S_IFMT) == S_IFLNK, (try? tree.readLink(link.path)) == link.target {
                        placed.append(link.path)
                        continue
                    }
                    try tree.removeTree(link.path)
                }
                try tree.makeLink(link.path, to: link.target)
                placed.append(link.path)
            }
        } catch { throw PatchSyncError.wrap(error).during("placing the folders and links of \(manifest.buildId)") }
        return placed
    }

    /// How the live tree's folders and links differ from `manifest`'s.
    static func check(_ manifest: Manifest, in directory: String) -> [VerifyReport.Damage] {
        var found: [VerifyReport.Damage] = []
        for folder in manifest.folders ?? [] {
            let st = try? FileSystem.status(directory + "/" + folder.path)
            if st.map({ ($0.st_mode & S_IFMT) != S_IFDIR }) ?? true {
                found.append(
                    VerifyReport.Damage(path: folder.path, problem: .missing, expected: "a folder", actual: nil))
            }
        }
        for link in manifest.links ?? [] {
            let full = directory + "/" + link.path
            guard let st = try? FileSystem.status(full), (st.st_mode & S_IFMT) == S_IFLNK else {
                found.append(
                    VerifyReport.Damage(
                        path: link.path, problem: .missing, expected: "a link to \(link.target)", actual: nil))
                continue
            }
            let target = (try? FileSystem.readLink(full)) ?? ""
            if target != link.target {
                found.append(
                    VerifyReport.Damage(path: link.path, problem: .wrongLink, expected: link.target, actual: target))
            }
        }
        return found
    }
}
