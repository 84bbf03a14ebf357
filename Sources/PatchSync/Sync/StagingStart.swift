import Foundation

/// Where a staging starts: in the folder of a kept build that rollback does not need, brought forward
/// (``Install/recycleSlot(for:buildsKept:)``), or in a new folder.
struct StagingStart {
    /// The staged folder (a recycled build's, or a new one).
    var tree: TreeRoot
    /// How many files of it are in place already: their records (the recycled build's) carry over.
    var unchanged = 0
    /// The files still to place (nil: all of the manifest's).
    var pending: [FileEntry]?
    /// The recycled build's recorded paths whose records go when the staging is finished.
    var replaced: [String] = []
    /// The live files to take the rest from.
    var live: LiveTree

    /// Where the staging of `manifest` into `staged` starts
    /// (``Syncer/stage(_:into:live:context:report:step:recycling:)``).
    static func of(
        _ manifest: Manifest, staged: StagedBuild, install: Install, live checked: LiveTree?, context: SyncContext,
        recycling: Bool
    ) throws(PatchSyncError) -> StagingStart {
        let slot = recycling ? try slot(for: staged, install: install, buildsKept: context.config.buildsKept) : nil
        let tree = try staged.makeFolder(in: install)
        guard let slot else {
            if let checked { return StagingStart(tree: tree, live: checked) }
            return StagingStart(tree: tree, live: try install.liveTrees(state: context.state))
        }
        let stash: TreeRoot
        do {
            stash = try TreeRoot(install.stateDirectory).subtree(
                String(install.layout.recycledFolder.dropFirst(install.stateDirectory.count + 1)) + "/"
                    + staged.identity.name)
        } catch { throw PatchSyncError.wrap(error).during("staging \(staged.identity.name)") }
        let (pending, unchanged, moved, replaced) = try install.sortRecycled(
            records: try context.state.read().recordsKey(of: staged.identity.name), manifest: manifest, tree: tree,
            stash: stash, state: context.state)
        // Checked again after the move, only the files that may give what is not in place; the recycled
        // build's files moved out of the way are sources too (after the live ones).
        let interest = LiveTree.Interest(manifest, pending: pending)
        var live = try install.liveTrees(state: context.state, interest: interest)
        live.linkable.merge(moved) { mine, _ in mine }
        return StagingStart(
            tree: tree, unchanged: unchanged, pending: pending, replaced: replaced, live: live)
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
