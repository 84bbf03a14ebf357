import Foundation
import Logging

extension Install {
    static let recycleLogger = Logger(label: "patchsync.recycle")

    /// The kept deployment whose folder a new staging of `staged` starts from, moved into staging/ with
    /// one rename: the one the next apply would retire (``InstallState/recyclable(buildsKept:)``; with the
    /// default of two kept builds, the previous one). Its files that the new build has unchanged are then
    /// not touched (``StagingStart``), where a staging from an empty folder links every one of them.
    ///
    /// Nil, and staging starts from an empty folder, when the staged folder exists already (a resume),
    /// when no such deployment is kept (the first update after an install, `keepBuilds` 1), when its
    /// files were never recorded, when the live tree's lock or `running.lock` is taken (like an apply
    /// retiring a build, a folder leaves builds/ only while no game runs and nothing swaps), or when
    /// `current` does not point where the state says (a flip not recorded yet: the next command's
    /// recovery settles it first). The state records the move before it is made, and forgets it when the
    /// move fails; a kill between the two leaves the folder in builds/, and the next run forgets it then.
    func recycleSlot(for staged: StagedBuild, buildsKept: Int) throws(PatchSyncError) -> String? {
        guard !FileSystem.exists(staged.directory) else { return nil }
        let state = staged.state, name = staged.identity.name
        // Both locks before the state is read: no apply, rollback or launch changes it meanwhile.
        guard let live = try? lock(.live, for: "recycling a kept build's folder") else { return nil }
        defer { withExtendedLifetime(live) {} }
        guard let running = try RunningLock.exclusive(path: runningLockPath) else { return nil }
        defer { withExtendedLifetime(running) {} }
        let recorded = try state.read()
        guard recorded.staging?.name == name, currentDeployment() == recorded.current,
            let slot = recorded.recyclable(buildsKept: buildsKept), FileSystem.isDirectory(buildDirectory(slot)),
            try state.hasBuildFiles(build: recorded.recordsKey(of: slot)),
            try state.update(nil, { $0.recycle(slot, into: name) })
        else { return nil }
        do {
            // Into staging/ as a real folder (a link planted in its place is removed, never followed).
            let stagingName = String(stagingDirectory.dropFirst(stateDirectory.count + 1))
            let folder = try TreeRoot(stateDirectory).makeFolder(stagingName)
            if renameat(AT_FDCWD, buildDirectory(slot), folder.fd, name) != 0 {
                throw Errno(errno, "moving \(buildDirectory(slot)) to", staged.directory)
            }
        } catch {
            Self.recycleLogger.notice("staging \(name) from an empty folder: moving \(slot) failed: \(error)")
            try state.update { $0.recycleUndone(slot) }
            return nil
        }
        Self.recycleLogger.info("staging \(name) in the folder of \(slot), which is no rollback target any more")
        return slot
    }

    /// What the recycled deployment's files (its records under `records`) in the staged `tree` are to the
    /// staging of `manifest`. A file that is, untouched, the one the recycled build was verified with stays
    /// where it is when the manifest wants the same content, size and mode there (`unchanged`). Untouched
    /// means: its stat as its record (size, time, inode; regular, mode as installed). Any other such file whose content the new build has elsewhere is moved out of the staging's
    /// way into `stash` (`recycled/<name>/`, same relative path): a source to link a file of that content
    /// from (a file renamed, one put back), never a file staging writes over; the rest is removed. Files
    /// that are not the recycled build's as verified (changed by hand, written by a killed run of this
    /// staging) stay for staging to replace. Run again after a kill, it finds what the first run moved in
    /// `stash`. `pending`: the files of `manifest` not in place; `replaced`: the recorded paths whose
    /// records the staged build does not keep.
    func sortRecycled(
        records: String, manifest: Manifest, tree: TreeRoot, stash: TreeRoot, state: StateStore
    ) throws(PatchSyncError) -> (
        pending: [FileEntry], unchanged: Int, moved: [Plan.Content: String], replaced: [String]
    ) {
        var (same, others) = try Self.compareRecords(records, with: manifest, state: state)
        var unchanged = Set<String>(minimumCapacity: same.count)
        var memo = TreeRoot.FolderMemo(), stashMemo = TreeRoot.FolderMemo()
        func asVerified(_ st: stat?, _ file: StateStore.BuildFile, _ cached: StateStore.FileStat?) -> Bool {
            guard let st, let cached, (st.st_mode & S_IFMT) == S_IFREG else { return false }
            return UInt32(st.st_mode) & 0o777 == file.mode && StateStore.FileStat(st) == cached
        }
        for (file, cached) in same {
            do {
                if asVerified(try tree.status(file.path, memo: &memo), file, cached) {
                    unchanged.insert(file.path)
                } else {
                    others.append((file, cached))
                }
            } catch { throw PatchSyncError.wrap(error).during("staging \(file.path)") }
        }
        // Contents the new build still needs: only a file of one of them is worth keeping as a source.
        let pending = manifest.files.filter { !unchanged.contains($0.path) }
        let needed = Set(pending.map(Plan.Content.init))
        var moved: [Plan.Content: String] = [:]
        for (file, cached) in others {
            guard let sha = SHA256Digest(hex: file.sha256) else { continue }
            let content = Plan.Content(sha256: sha, mode: file.mode)
            do {
                guard asVerified(try tree.status(file.path, memo: &memo), file, cached) else {
                    if asVerified(try stash.status(file.path, memo: &stashMemo), file, cached) {
                        moved[content] = stash.full(file.path)
                    }
                    continue
                }
                if needed.contains(content) {
                    try tree.move(file.path, to: stash, file.path, memo: &memo)
                    moved[content] = stash.full(file.path)
                } else {
                    try tree.remove(file.path)  // no use to the new build: its disk space back at once
                }
            } catch { throw PatchSyncError.wrap(error).during("staging \(file.path)") }
        }
        return (pending, unchanged.count, moved, others.map(\.0.path))
    }
}

extension Install {
    typealias RecordedFile = (StateStore.BuildFile, StateStore.FileStat?)

    /// The recycled build's records against `manifest`: those the manifest has the same at the same path,
    /// to be checked by stat (`same`), and the rest (`others`). The records come in path order: a merge with the manifest's files in the
    /// same order finds each one's.
    fileprivate static func compareRecords(
        _ records: String, with manifest: Manifest, state: StateStore
    ) throws(PatchSyncError) -> (same: [RecordedFile], others: [RecordedFile]) {
        var same: [RecordedFile] = [], others = same
        var targets = PathOrder(manifest.files)
        try state.forEachBuildFile(build: records) { (file, cached) throws(PatchSyncError) in
            guard let cached, let target = targets.file(at: file.path), target.size == file.size,
                Plan.installedMode(target.mode) == file.mode, target.sha256.hex == file.sha256
            else {
                others.append((file, cached))
                return
            }
            same.append((file, cached))
        }
        return (same, others)
    }
}

/// A manifest's files in path order (bytewise, a binary manifest's own order; sorted once otherwise),
/// walked forward by lookups of increasing paths: a merge with another sorted list, no table of every path.
struct PathOrder {
    private let files: [FileEntry]
    private var order: [Int]?
    private var cursor = 0

    init(_ files: [FileEntry]) {
        self.files = files
        let sorted = files.indices.dropFirst().allSatisfy { PathIndex.precedes(files[$0 - 1].path, files[$0].path) }
        order = sorted ? nil : files.indices.sorted { PathIndex.precedes(files[$0].path, files[$1].path) }
    }

    /// The file at `path`, which is after every path asked for before.
    mutating func file(at path: String) -> FileEntry? {
        while cursor < files.count, PathIndex.precedes(self[cursor].path, path) { cursor += 1 }
        return cursor < files.count && self[cursor].path == path ? self[cursor] : nil
    }

    private subscript(_ i: Int) -> FileEntry { files[order?[i] ?? i] }
}
