import Foundation

/// Where a staging starts: in the folder of a kept build that rollback does not need, brought forward
/// (``Install/recycleSlot(for:buildsKept:)``), or in a new folder.
enum StagingStart {
    /// The staged folder (a recycled build's, or a new one), the paths of it already in place, and the
    /// live files to take the rest from (``Syncer/stage(_:into:live:context:report:step:recycling:)``).
    static func of(
        _ manifest: Manifest, staged: StagedBuild, install: Install, live checked: LiveTree?, context: SyncContext,
        recycling: Bool
    ) throws(PatchSyncError) -> (TreeRoot, Set<String>, LiveTree) {
        let slot = recycling ? try slot(for: staged, install: install, buildsKept: context.config.buildsKept) : nil
        let tree = try staged.makeFolder(in: install)
        guard let slot else {
            if let checked { return (tree, [], checked) }
            return (tree, [], try install.liveTrees(state: context.state))
        }
        let stash: TreeRoot
        do {
            stash = try TreeRoot(install.stateDirectory).subtree(
                String(install.layout.recycledFolder.dropFirst(install.stateDirectory.count + 1)) + "/"
                    + staged.identity.name)
        } catch { throw PatchSyncError.wrap(error).during("staging \(staged.identity.name)") }
        let (unchanged, moved) = try install.sortRecycled(
            slot, manifest: manifest, tree: tree, stash: stash, state: context.state)
        // Checked again after the move, only the files that may give what is not in place; the recycled
        // build's files moved out of the way are sources too (after the live ones).
        let interest = LiveTree.Interest(manifest, besides: unchanged)
        var live = try install.liveTrees(state: context.state, interest: interest)
        live.linkable.merge(moved) { mine, _ in mine }
        return (tree, unchanged, live)
    }

    /// The kept build whose folder `staged` starts from: the one a killed run of this staging took, while
    /// its folder is there, else one taken now when the staging is new.
    private static func slot(for staged: StagedBuild, install: Install, buildsKept: Int) throws(PatchSyncError)
        -> String?
    {
        let recorded = try staged.state.read()
        if let taken = recorded.recycling, recorded.staging?.name == staged.identity.name {
            if FileSystem.isDirectory(staged.directory) { return taken }
            // Killed between the record and the move (the folder is still in builds/), or the staged
            // folder deleted by hand since: that build is no longer being brought forward.
            try staged.state.update { $0.recycleUndone(taken) }
            return nil
        }
        return try install.recycleSlot(for: staged, buildsKept: buildsKept)
    }
}
