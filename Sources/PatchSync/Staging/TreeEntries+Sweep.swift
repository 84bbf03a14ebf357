import Foundation
import Logging

extension TreeEntries {
    static let logger = Logger(label: "patchsync.staging")

    /// Places the manifest's links and folders, and removes anything else in the staged folder: only the
    /// signed build goes live (what was left by hand, by an older staging, or planted is removed, links
    /// with it, never followed). Returns every folder of the build, the root included.
    static func placeAll(_ manifest: Manifest, in tree: TreeRoot, directory: String) throws(PatchSyncError)
        -> Set<String>
    {
        let entries = try TreeEntries.place(manifest, in: tree)
        var folders: Set<String> = [""]
        var lastParent: Substring?
        for path in manifest.files.lazy.map(\.path) + entries {
            let parent = path.lastIndex(of: "/").map { path[..<$0] }
            guard parent != lastParent else { continue }  // a build's files come folder by folder
            lastParent = parent
            for folder in PathRule.ancestors(path).reversed() where !folders.insert(folder).inserted { break }
        }
        var signed = folders
        signed.reserveCapacity(folders.count + manifest.files.count + entries.count)
        for path in manifest.files.lazy.map(\.path) + entries { signed.insert(path) }
        do {
            let strays = try tree.removeAll(except: signed, folders: folders.union(manifest.folders?.map(\.path) ?? []))
            if !strays.isEmpty {
                logger.notice(
                    "removed \(strays.count) entries from \(directory) that the build does not have: \(strays.prefix(5))"
                )
            }
        } catch { throw PatchSyncError.wrap(error) }
        return folders
    }
}
