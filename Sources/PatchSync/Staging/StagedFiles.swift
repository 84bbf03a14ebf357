import Foundation

/// The open files of a build being staged, and the record of chunks written into them.
///
/// Chunks are recorded done in the state database only after the files they went to are
/// synced. Syncing happens on a thread of its own, so the workers that inflate and verify never
/// wait for the disk: a worker queues what it wrote, and a fetch that wants its chunks durable
/// (before it frees its connection for the next request) awaits ``durable()``. So what a killed
/// sync loses is what was in flight: bytes being received or waiting for their flush.
///
/// Thread-safety: a ``ConditionLock`` holds the descriptor table, the pending records, the flush
/// tickets and the waiters, and is what the flusher, `flush()` and `closeAll()` wait on; chunk
/// writes use pwrite at distinct offsets.
final class StagedFiles: Sendable {
    /// What the writers, the flusher and the waiters share.
    private struct Shared {
        var open: [String: FileDescriptor] = [:]
        /// The inode of each file written to, as opened: a resume record names it.
        var inodes: [String: Int64] = [:]
        /// Files of ``toCreate`` this run created (or found created): never created again, so a
        /// file deleted by hand mid-sync fails its next open instead of coming back empty.
        var created = Set<String>()
        var pending: [StateStore.ChunkRecord] = []
        var pendingFiles = Set<String>()
        var pendingBytes = 0
        var bytesWritten: Int64 = 0
        /// Bytes queued so far (`bytesWritten`), and how many of them are synced and recorded.
        var flushed: Int64 = 0
        var flushFailure: PatchSyncError?
        /// Fetches waiting until `flushed` reaches their ticket.
        var waiters: [(ticket: Int64, continuation: CheckedContinuation<PatchSyncError?, Never>)] = []
        var flushing = false
        var stopping = false
        var flusherDone = false

        /// Whether the flusher has work: enough pending, or a fetch waiting for what is pending;
        /// never while a flush runs.
        var flushDue: Bool {
            !flushing
                && (pending.count >= StagedFiles.flushChunks || pendingBytes >= StagedFiles.flushBytes
                    || (!waiters.isEmpty && !pending.isEmpty))
        }
    }

    let directory: String
    /// The staged folder's descriptor: every file is opened and created beneath it.
    let tree: TreeRoot
    let build: String
    private let state: StateStore
    private let lock = ConditionLock(Shared())

    /// Room kept beyond the content for the state database, metadata and file-system overhead.
    static let slackBytes: Int64 = 4 << 20

    /// The flusher runs when a fetch awaits its chunks, or when this many chunks or bytes are
    /// pending, whichever comes first.
    static let flushChunks = 64
    static let flushBytes = 4 << 20

    /// Files that their first write creates, at their final size (``StagedBuild/Prepared/toCreate``).
    private let toCreate: [String: Int64]

    init(_ staged: StagedBuild, tree: TreeRoot, creating toCreate: [String: Int64] = [:]) {
        directory = staged.directory
        self.tree = tree
        build = staged.identity.name
        self.toCreate = toCreate
        let state = staged.state
        self.state = state
        let thread = Thread { [self] in flushLoop() }
        thread.name = "patchsync-flush"
        thread.start()
    }

    /// Writes a verified chunk (`sha256`) to each destination, then queues the destinations to be recorded.
    func write(
        _ bytes: UnsafeRawBufferPointer, chunk sha256: SHA256Digest,
        to destinations: [Plan.Destination]
    ) throws(PatchSyncError) {
        var inodes: [Int64] = []
        for destination in destinations {
            do {
                let (fd, inode) = try descriptor(destination.path)
                try fd.write(bytes, at: destination.offset)
                inodes.append(inode)
            } catch { throw PatchSyncError.wrap(error).during("staging \(destination.path)") }
        }
        let records = zip(destinations, inodes).map {
            StateStore.ChunkRecord(ref: .init(path: $0.path, index: $0.index), sha256: sha256.hex, inode: $1)
        }
        let count = bytes.count * destinations.count
        lock.withLock { shared in
            shared.pending += records
            for destination in destinations { shared.pendingFiles.insert(destination.path) }
            shared.pendingBytes += count
            shared.bytesWritten += Int64(count)
            if shared.pending.count >= Self.flushChunks || shared.pendingBytes >= Self.flushBytes { lock.broadcast() }
        }
    }

    /// Bytes written to staged files so far (each destination counts).
    var bytesWritten: Int64 { lock.withLock { $0.bytesWritten } }

    /// Returns once every chunk written before the call is synced and recorded done; throws
    /// what the flush that covered them failed with.
    func durable() async throws(PatchSyncError) {
        let failure = await withCheckedContinuation { (continuation: CheckedContinuation<PatchSyncError?, Never>) in
            let now = lock.withLock { shared -> PatchSyncError?? in
                if let flushFailure = shared.flushFailure { return .some(flushFailure) }
                if shared.flushed >= shared.bytesWritten { return .some(nil) }
                shared.waiters.append((shared.bytesWritten, continuation))
                lock.broadcast()
                return .none
            }
            if let now { continuation.resume(returning: now) }
        }
        if let failure { throw failure }
    }

    /// Syncs and records everything written so far, on the caller's thread (at the end of a stage).
    func flush() throws(PatchSyncError) {
        lock.withLock(when: { !$0.flushing }) { $0.flushing = true }
        flushPending()
        if let failure = lock.withLock({ $0.flushFailure }) { throw failure }
    }

    /// Ends the flusher (after a last flush) and closes every descriptor.
    func closeAll() {
        lock.withLock { shared in
            shared.stopping = true
            lock.broadcast()
        }
        lock.withLock(when: { $0.flusherDone }) { $0.open.removeAll() }
    }

    private func flushLoop() {
        while true {
            let go = lock.withLock(when: { $0.stopping || $0.flushDue }) { shared -> Bool in
                if shared.stopping && (shared.flushing || shared.pending.isEmpty) { return false }
                shared.flushing = true
                return true
            }
            guard go else { break }
            flushPending()
        }
        lock.withLock { shared in
            shared.flusherDone = true
            lock.broadcast()
        }
    }

    /// Takes the pending records, syncs their files and records them; the caller has set `flushing`.
    private func flushPending() {
        let (refs, paths, ticket) = lock.withLock { shared -> ([StateStore.ChunkRecord], Set<String>, Int64) in
            defer {
                shared.pending = []
                shared.pendingFiles = []
                shared.pendingBytes = 0
            }
            return (shared.pending, shared.pendingFiles, shared.bytesWritten)
        }
        if !refs.isEmpty { CrashPoint.batchWritten.reached() }
        var failure: PatchSyncError?
        do throws(PatchSyncError) { try record(refs, syncing: paths) } catch { failure = error }
        let resume = lock.withLock { shared -> [(CheckedContinuation<PatchSyncError?, Never>, PatchSyncError?)] in
            shared.flushing = false
            shared.flushFailure = shared.flushFailure ?? failure
            if shared.flushFailure == nil { shared.flushed = ticket }
            let (failed, flushed) = (shared.flushFailure, shared.flushed)
            let ready = shared.waiters.filter { failed != nil || $0.ticket <= flushed }
            shared.waiters.removeAll { failed != nil || $0.ticket <= flushed }
            lock.broadcast()
            return ready.map { ($0.continuation, failed) }
        }
        for (continuation, failure) in resume { continuation.resume(returning: failure) }
    }

    private func record(_ refs: [StateStore.ChunkRecord], syncing paths: Set<String>) throws(PatchSyncError) {
        guard !refs.isEmpty else { return }
        // No fsync: the bytes are in the page cache, which a killed process does not take with it, and
        // the records name the boot. After a reboot (power lost, the page cache with it) a resume hashes
        // the recorded bytes again before it trusts them (StagedBuild.prepare), and one syncfs(2) makes
        // the whole tree durable before it is marked ready (Syncer.finish). As OSTree pulls.
        // Each file's stamp, with this boot's id: while it stats the same in the same boot, a resume
        // trusts the records without reading the file again (StagedBuild.prepare).
        var stamps: [StateStore.FileStamp] = []
        for path in paths {
            do { stamps.append(StateStore.FileStamp(path: path, try descriptor(path).fd.status())) } catch {
                throw PatchSyncError.wrap(error).during("staging \(path)")
            }
        }
        try state.recordDone(build, refs, stamps: stamps)
    }

    /// The open descriptor of a staged file, and its inode; creates a file of ``toCreate`` (at its
    /// size) on its first write. Opens outside the lock, so that workers create files side by side.
    /// A file that is not the one this run wrote (another inode, a link, larger than its content) is
    /// refused: its records would vouch for bytes that are not there.
    private func descriptor(_ path: String) throws(Errno) -> (fd: FileDescriptor, inode: Int64) {
        let (known, mayCreate, expected) = lock.withLock {
            shared -> ((fd: FileDescriptor, inode: Int64)?, Bool, Int64?) in
            if let fd = shared.open[path], let inode = shared.inodes[path] { return ((fd, inode), false, inode) }
            return (nil, toCreate[path] != nil && !shared.created.contains(path), shared.inodes[path])
        }
        if let known { return known }
        let full = directory + "/" + path
        var fd: FileDescriptor?
        if mayCreate, let size = toCreate[path] {
            do throws(Errno) {
                let created = try tree.open(path, flags: O_RDWR | O_CREAT | O_EXCL, mode: 0o600)
                try created.truncate(to: size)
                fd = created
            } catch {
                if error.code != EEXIST { throw error }  // EEXIST: another worker created it first
            }
        }
        let file: FileDescriptor
        if let fd { file = fd } else { file = try tree.open(path, flags: O_RDWR) }
        let st = try file.status()
        let inode = Int64(st.st_ino)
        guard (st.st_mode & S_IFMT) == S_IFREG, st.st_nlink == 1, expected == nil || expected == inode,
            Int64(st.st_size) <= (toCreate[path] ?? Int64.max)
        else {
            throw Errno(ESTALE, "staging (the file was replaced while the sync ran; run sync again)", full)
        }
        return lock.withLock { shared in
            shared.created.insert(path)
            if let other = shared.open[path], let inode = shared.inodes[path] { return (other, inode) }
            if shared.open.count >= 256 { shared.open.removeAll() }
            shared.open[path] = file
            shared.inodes[path] = inode
            return (file, inode)
        }
    }
}
