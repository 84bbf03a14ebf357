import Foundation

/// The open files of a build being staged, and the record of chunks written into them.
///
/// Thread-safety: `lock` guards the descriptor table and the pending records; chunk
/// writes use pwrite at distinct offsets. Chunks are recorded done in the state
/// database only after the files they went to are synced.
final class StagedFiles: @unchecked Sendable {
    let directory: String
    let build: String
    private let state: StateStore
    private let lock = NSLock()
    private var open: [String: FileDescriptor] = [:]
    private var pending: [StateStore.ChunkRef] = []
    private var pendingFiles = Set<String>()
    private var pendingBytes = 0
    private(set) var bytesWritten: Int64 = 0

    /// Above this many files in one flush, the whole file system is synced once instead.
    static let filesPerSync = 16

    /// Room kept beyond the content for the state database, metadata and file-system overhead.
    static let slackBytes: Int64 = 4 << 20

    /// Flush the records after this many chunks or bytes, whichever comes first.
    static let flushChunks = 64
    static let flushBytes = 4 << 20

    init(directory: String, build: String, state: StateStore) {
        self.directory = directory
        self.build = build
        self.state = state
    }

    /// Creates (or keeps, when resuming) the staged file at its final size.
    func prepare(_ file: FileEntry) throws(PatchSyncError) {
        let full = directory + "/" + file.path
        do {
            if let st = try FileSystem.status(full), st.st_nlink > 1 || (st.st_mode & S_IFMT) != S_IFREG {
                try FileSystem.remove(full)  // never write into a file shared with the live tree
            }
            try FileSystem.makeDirectory((full as NSString).deletingLastPathComponent, within: directory)
            let fd = try FileDescriptor(path: full, flags: O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600)
            if try fd.status().st_size != file.size { try fd.truncate(to: file.size) }
        } catch { throw PatchSyncError.wrap(error).during("staging \(file.path)") }
    }

    /// Writes a verified chunk to each destination, then queues the destinations to be recorded.
    func write(_ bytes: UnsafeRawBufferPointer, to destinations: [Plan.Destination]) throws(PatchSyncError) {
        for destination in destinations {
            do { try descriptor(destination.path).write(bytes, at: destination.offset) } catch {
                throw PatchSyncError.wrap(error).during("staging \(destination.path)")
            }
        }
        let flush: Bool = lock.withLock {
            pending += destinations.map { StateStore.ChunkRef(path: $0.path, index: $0.index) }
            destinations.forEach { pendingFiles.insert($0.path) }
            pendingBytes += bytes.count * destinations.count
            bytesWritten += Int64(bytes.count * destinations.count)
            return pending.count >= Self.flushChunks || pendingBytes >= Self.flushBytes
        }
        if flush { try self.flush() }
    }

    /// Syncs the files written since the last flush, then records their chunks done.
    func flush() throws(PatchSyncError) {
        let (refs, paths) = lock.withLock { () -> ([StateStore.ChunkRef], Set<String>) in
            defer { pending = []; pendingFiles = []; pendingBytes = 0 }
            return (pending, pendingFiles)
        }
        guard !refs.isEmpty else { return }
        if paths.count > Self.filesPerSync, let any = paths.first {
            // Many small files: one syncfs(2) of the file system beats an fsync per file.
            do { try FileSystem.syncFileSystem(of: directory + "/" + any) } catch {
                throw PatchSyncError.wrap(error).during("staging")
            }
        } else {
            for path in paths {
                do { try descriptor(path).sync() } catch { throw PatchSyncError.wrap(error).during("staging \(path)") }
            }
        }
        try state.recordDone(build: build, refs)
    }

    /// Closes every descriptor (after the last flush).
    func closeAll() {
        lock.withLock { open.removeAll() }
    }

    private func descriptor(_ path: String) throws(Errno) -> FileDescriptor {
        lock.lock()
        defer { lock.unlock() }
        if let fd = open[path] { return fd }
        if open.count >= 256 { open.removeAll() }
        let fd = try FileDescriptor(path: directory + "/" + path, flags: O_RDWR | O_NOFOLLOW)
        open[path] = fd
        return fd
    }
}
