import Foundation

/// The hard links of a staged build's unchanged files.
enum StagedLinks {
    /// Hard-links unchanged files from the live tree (they are read-only there), beneath the staged
    /// tree's descriptor: whatever stands at a path (a file, a folder, a planted link) is removed first.
    /// A path that is free (most of them, in a new staging folder) is linked at once, its folder kept
    /// open for the next path; only where that fails is what stands there looked at. A long list is
    /// linked by two threads, each over its own folders: a link is mostly the file system's own work,
    /// which two cores do side by side.
    static func link(_ links: [Plan.Link], into tree: TreeRoot, layout: InstallLayout) throws(PatchSyncError) {
        var split = links.count >= Self.linksPerThread * 2 ? links.count / 2 : links.count
        // At a folder boundary, so that the two threads never link into the same folder (they may make a
        // common ancestor side by side: making a folder that another thread made meanwhile is no failure).
        while split < links.count, split > 0,
            PathRule.split(links[split].path).folder == PathRule.split(links[split - 1].path).folder
        {
            split += 1
        }
        let runs = [links[..<split], links[split...]].filter { !$0.isEmpty }
        let failure = ConditionLock<Errno?>(nil)
        DispatchQueue.concurrentPerform(iterations: runs.count) { run in
            do throws(Errno) { try Self.link(runs[run], into: tree, layout: layout) } catch {
                failure.withLock { $0 = $0 ?? error }
            }
        }
        if let error = failure.withLock({ $0 }) { throw PatchSyncError.wrap(error) }
    }

    /// Below this many links, one thread links them all.
    static let linksPerThread = 2048

    private static func link(_ links: ArraySlice<Plan.Link>, into tree: TreeRoot, layout: InstallLayout)
        throws(Errno)
    {
        var memo = TreeRoot.FolderMemo()
        for link in links {
            // The memo stays: what the careful path below removes is the entry at the path, never its folder.
            if (try? tree.linkFile(at: link.source, to: link.path, memo: &memo)) != nil { continue }
            if let st = try tree.status(link.path) {
                if let src = try FileSystem.status(link.source), st.st_ino == src.st_ino { continue }
                try tree.removeTree(link.path)
            }
            do { try tree.linkFile(at: link.source, to: link.path) } catch {
                // The ready tree it came from was applied meanwhile: it is in builds/ now. Any other failure
                // (a full disk, a file at its link limit) is the one reported.
                guard error.code == ENOENT, let applied = layout.buildPath(ofStaged: link.source) else { throw error }
                try tree.linkFile(at: applied, to: link.path)
            }
        }
    }
}
