import Foundation

/// A deployment being assembled in `.patchsync/staging/<name>`: its identity, its folder, and the
/// resume records that say which chunks are already written there.
///
/// It owns the rule that nothing unverified goes live: a record counts only while it still vouches
/// for the bytes on disk. A record names the chunk's hash and the file's inode; it is dropped when
/// the manifest wants another chunk there, when the file is missing, replaced, shared with another
/// tree, or of another size (then the file is created afresh), and when the bytes no longer hash to
/// the chunk. A file that still stats as it did after its last flush in this boot
/// (``StateStore/FileStamp``: nothing wrote to it since, and its unsynced bytes are still in the page
/// cache) is vouched for by its records; after a reboot, and the bytes of any other file with
/// records are read and hashed once more, at resume. The state drops all records of a deployment
/// when it stops being the one staged (ready, applied, abandoned).
struct StagedBuild: Sendable {
    let identity: DeploymentIdentity
    let directory: String
    let state: StateStore

    init(_ identity: DeploymentIdentity, directory: String, state: StateStore) {
        self.identity = identity
        self.directory = directory
        self.state = state
    }

    /// Creates the folder (and staging/ itself, which a user may have deleted) and opens it as the
    /// tree every staging step works beneath: a link planted in place of `staging/` or of the
    /// deployment's folder is removed and a real folder made, never followed.
    @discardableResult
    func makeFolder(under stateDirectory: String) throws(PatchSyncError) -> TreeRoot {
        do {
            return try TreeRoot(stateDirectory).subtree(String(directory.dropFirst(stateDirectory.count + 1)))
        } catch { throw PatchSyncError.wrap(error).during("staging \(identity.name)") }
    }

    /// Makes each of `files` ready to be written in place (at its final size, not shared with the
    /// live tree) and returns the chunks already written and still verified; every other record of
    /// those files is dropped. A file that does not exist yet is left for its first write to create
    /// (``Prepared/toCreate``), on the workers, while the transfer runs; its folder is made here.
    func prepare(_ files: [FileEntry], in tree: TreeRoot) throws(PatchSyncError) -> Prepared {
        let records = Dictionary(grouping: try state.chunkRecords(identity.name), by: \.ref.path)
        let stamps = try state.fileStamps(identity.name)
        var prepared = Prepared()
        var dropped: [StateStore.ChunkRef] = []
        // A staging folder still empty, with nothing recorded (a fresh install's): no file to look at.
        let fresh = records.isEmpty && stamps.isEmpty && (try? tree.folder("")?.rawEntries().isEmpty) == true
        var memo = TreeRoot.FolderMemo()
        for file in files {
            let recorded = records[file.path] ?? []
            let kept = try prepare(
                file, recorded, stamp: stamps[file.path], in: tree, fresh: fresh, memo: &memo, into: &prepared)
            prepared.done.formUnion(kept)
            dropped += recorded.map(\.ref).filter { !kept.contains($0) }
        }
        try state.forgetChunks(identity.name, dropped)
        return prepared
    }

    /// What ``prepare(_:)`` found: the chunks still verified, and how many recorded bytes it had to
    /// read again (files changed since their last flush, or never stamped).
    struct Prepared {
        var done = Set<StateStore.ChunkRef>()
        var filesVouched = 0
        var filesReread = 0
        var bytesReread: Int64 = 0
        /// Folders this pass made or found to be real folders (not links): each checked once, not
        /// once per file in it.
        var folders = Set<String>()
        /// Files to be created by their first write (``StagedFiles``), and their sizes: files of
        /// content whose folder is ready and that hold no chunk yet.
        var toCreate: [String: Int64] = [:]
    }

    /// Prepares one file; returns the recorded chunks that still vouch for its bytes.
    private func prepare(
        _ file: FileEntry, _ recorded: [StateStore.ChunkRecord], stamp: StateStore.FileStamp?,
        in tree: TreeRoot, fresh: Bool, memo: inout TreeRoot.FolderMemo, into prepared: inout Prepared
    ) throws(PatchSyncError) -> Set<StateStore.ChunkRef> {
        do {
            // Beneath the tree's descriptor: a folder swapped for a link hides what is behind it
            // (nothing found, nothing removed there), and the link is replaced by a real folder below.
            let st = fresh ? nil : try tree.status(file.path, memo: &memo)
            let records =
                st.map { st in recorded.filter { $0.inode == Int64(st.st_ino) && Self.wants(file, $0) } } ?? []
            // A file no record vouches for is made anew: never written through in place (a recycled build's
            // old, read-only version of it may stand there).
            if let st, st.st_nlink == 1, (st.st_mode & S_IFMT) == S_IFREG, Int64(st.st_size) == file.size,
                !records.isEmpty
            {
                if let stamp, stamp == StateStore.FileStamp(path: file.path, st) {
                    prepared.filesVouched += 1
                    return Set(records.map(\.ref))
                }
                prepared.filesReread += 1
                prepared.bytesReread += records.reduce(0) { $0 + Int64(file.chunks[$1.ref.index].length) }
                return try stillVerified(file, records, in: tree)
            }
            if st != nil { try tree.removeTree(file.path) }  // never write into a file shared with the live tree
            let folder = PathRule.split(file.path).folder
            if !prepared.folders.contains(folder) {
                try tree.makeFolder(folder)
                prepared.folders.insert(folder)
            }
            if file.size > 0 {
                prepared.toCreate[file.path] = file.size
            } else {
                _ = try tree.open(file.path, flags: O_RDWR | O_CREAT | O_EXCL, mode: 0o600)
            }
            return []
        } catch { throw PatchSyncError.wrap(error).during("staging \(file.path)") }
    }

    /// Whether `record` names the chunk the manifest wants at its place.
    private static func wants(_ file: FileEntry, _ record: StateStore.ChunkRecord) -> Bool {
        file.chunks.indices.contains(record.ref.index) && file.chunks[record.ref.index].sha256.hex == record.sha256
    }

    /// The records (of the manifest's chunks) whose bytes in the file still hash to their chunk.
    private func stillVerified(
        _ file: FileEntry, _ wanted: [StateStore.ChunkRecord],
        in tree: TreeRoot
    ) throws(Errno) -> Set<StateStore.ChunkRef> {
        let fd = try tree.open(file.path, flags: O_RDONLY)
        var buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 0, alignment: 16)
        defer { buffer.deallocate() }
        var kept = Set<StateStore.ChunkRef>()
        for record in wanted {
            let chunk = file.chunks[record.ref.index]
            if buffer.count < chunk.length {
                buffer.deallocate()
                buffer = .allocate(byteCount: chunk.length, alignment: 16)
            }
            let bytes = UnsafeMutableRawBufferPointer(rebasing: buffer[..<chunk.length])
            try fd.read(into: bytes, at: chunk.offset)
            if SHA256Hasher.hash(UnsafeRawBufferPointer(bytes)) == chunk.sha256 { kept.insert(record.ref) }
        }
        return kept
    }

    /// The chunks recorded done for `manifest` in this run's records (no re-read): for planning
    /// again after the deltas wrote theirs.
    func recorded(_ manifest: Manifest) throws(PatchSyncError) -> Set<StateStore.ChunkRef> {
        let records = try state.chunkRecords(identity.name)
        let paths = Set(records.map(\.ref.path))  // the files written (a few of a large build, in an update)
        let files = Dictionary(
            manifest.files.lazy.filter { paths.contains($0.path) }.map { ($0.path, $0) },
            uniquingKeysWith: { a, _ in a })
        return Set(
            records.compactMap { record in
                guard let file = files[record.ref.path], file.chunks.indices.contains(record.ref.index),
                    file.chunks[record.ref.index].sha256.hex == record.sha256
                else { return nil }
                return record.ref
            })
    }
}
