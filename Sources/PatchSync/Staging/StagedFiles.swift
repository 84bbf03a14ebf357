import Foundation

/// The open files of a build being staged, and the record of chunks written into them.
///
/// Chunks are recorded done in the state database only after the files they went to are
/// synced. Syncing happens on a thread of its own, so the workers that inflate and verify never
/// wait for the disk: a worker queues what it wrote, and a fetch that wants its chunks durable
/// (before it frees its connection for the next request) awaits ``durable()``. So what a killed
/// sync loses is what was in flight, as before: bytes being received or waiting for their flush.
///
/// Thread-safety: `condition` guards the descriptor table, the pending records, the flush
/// tickets and the waiters; chunk writes use pwrite at distinct offsets.
final class StagedFiles: @unchecked Sendable {
    let directory: String
    let build: String
    private let state: StateStore
    private let condition = NSCondition()
    private var open: [String: FileDescriptor] = [:]
    /// The inode of each file written to, as opened: a resume record names it.
    private var inodes: [String: Int64] = [:]
    private var pending: [StateStore.ChunkRecord] = []
    private var pendingFiles = Set<String>()
    private var pendingBytes = 0
    private(set) var bytesWritten: Int64 = 0
    /// Writes queued so far, and how many of them are synced and recorded.
    private var written = 0
    private var flushed = 0
    private var flushFailure: PatchSyncError?
    private var waiters: [(ticket: Int, continuation: CheckedContinuation<PatchSyncError?, Never>)] = []
    private var flushing = false
    private var stopping = false
    private let flusherDone = DispatchSemaphore(value: 0)

    /// Above this many files in one flush, the whole file system is synced once instead.
    static let filesPerSync = 16

    /// Room kept beyond the content for the state database, metadata and file-system overhead.
    static let slackBytes: Int64 = 4 << 20

    /// The flusher runs when a fetch awaits its chunks, or when this many chunks or bytes are
    /// pending, whichever comes first.
    static let flushChunks = 64
    static let flushBytes = 4 << 20

    init(_ staged: StagedBuild) {
        directory = staged.directory
        build = staged.identity.name
        let state = staged.state
        self.state = state
        let thread = Thread { [self] in flushLoop() }
        thread.name = "patchsync-flush"
        thread.start()
    }

    /// Writes a verified chunk (`sha256`) to each destination, then queues the destinations to be recorded.
    func write(_ bytes: UnsafeRawBufferPointer, chunk sha256: SHA256Digest,
               to destinations: [Plan.Destination]) throws(PatchSyncError) {
        var inodes: [Int64] = []
        for destination in destinations {
            do {
                let (fd, inode) = try descriptor(destination.path)
                try fd.write(bytes, at: destination.offset)
                inodes.append(inode)
            } catch { throw PatchSyncError.wrap(error).during("staging \(destination.path)") }
        }
        condition.withLock {
            pending += zip(destinations, inodes).map {
                StateStore.ChunkRecord(ref: .init(path: $0.path, index: $0.index), sha256: sha256.hex, inode: $1)
            }
            destinations.forEach { pendingFiles.insert($0.path) }
            pendingBytes += bytes.count * destinations.count
            bytesWritten += Int64(bytes.count * destinations.count)
            written += 1
            if pending.count >= Self.flushChunks || pendingBytes >= Self.flushBytes { condition.broadcast() }
        }
    }

    /// Returns once every chunk written before the call is synced and recorded done; throws
    /// what the flush that covered them failed with.
    func durable() async throws(PatchSyncError) {
        let failure = await withCheckedContinuation { (continuation: CheckedContinuation<PatchSyncError?, Never>) in
            let now: PatchSyncError?? = condition.withLock {
                if let flushFailure { return .some(flushFailure) }
                if flushed >= written { return .some(nil) }
                waiters.append((written, continuation))
                condition.broadcast()
                return .none
            }
            if let now { continuation.resume(returning: now) }
        }
        if let failure { throw failure }
    }

    /// Syncs and records everything written so far, on the caller's thread (at the end of a stage).
    func flush() throws(PatchSyncError) {
        condition.lock()
        while flushing { condition.wait() }
        flushing = true
        condition.unlock()
        flushPending()
        if let failure = condition.withLock({ flushFailure }) { throw failure }
    }

    /// Ends the flusher (after a last flush) and closes every descriptor.
    func closeAll() {
        condition.withLock {
            stopping = true
            condition.broadcast()
        }
        flusherDone.wait()
        condition.withLock { open.removeAll() }
    }

    private func flushLoop() {
        while true {
            condition.lock()
            while !stopping && (flushing || !(pending.count >= Self.flushChunks || pendingBytes >= Self.flushBytes
                                              || (!waiters.isEmpty && !pending.isEmpty))) {
                condition.wait()
            }
            if stopping && (flushing || pending.isEmpty) {
                condition.unlock()
                break
            }
            flushing = true
            condition.unlock()
            flushPending()
        }
        flusherDone.signal()
    }

    /// Takes the pending records, syncs their files and records them; the caller has set `flushing`.
    private func flushPending() {
        let (refs, paths, ticket) = condition.withLock { () -> ([StateStore.ChunkRecord], Set<String>, Int) in
            defer { pending = []; pendingFiles = []; pendingBytes = 0 }
            return (pending, pendingFiles, written)
        }
        var failure: PatchSyncError?
        do throws(PatchSyncError) { try record(refs, syncing: paths) } catch { failure = error }
        let resume = condition.withLock { () -> [(CheckedContinuation<PatchSyncError?, Never>, PatchSyncError?)] in
            flushing = false
            flushFailure = flushFailure ?? failure
            if flushFailure == nil { flushed = ticket }
            let ready = waiters.filter { flushFailure != nil || $0.ticket <= flushed }
            waiters.removeAll { flushFailure != nil || $0.ticket <= flushed }
            condition.broadcast()
            return ready.map { ($0.continuation, flushFailure) }
        }
        for (continuation, failure) in resume { continuation.resume(returning: failure) }
    }

    private func record(_ refs: [StateStore.ChunkRecord], syncing paths: Set<String>) throws(PatchSyncError) {
        guard !refs.isEmpty else { return }
        if paths.count > Self.filesPerSync, let any = paths.first {
            // Many small files: one syncfs(2) of the file system beats an fsync per file.
            do { try FileSystem.syncFileSystem(of: directory + "/" + any) } catch {
                throw PatchSyncError.wrap(error).during("staging")
            }
        } else {
            for path in paths {
                do { try descriptor(path).fd.sync() } catch { throw PatchSyncError.wrap(error).during("staging \(path)") }
            }
        }
        try state.recordDone(build, refs)
    }

    /// The open descriptor of a staged file, and its inode.
    private func descriptor(_ path: String) throws(Errno) -> (fd: FileDescriptor, inode: Int64) {
        condition.lock()
        defer { condition.unlock() }
        if let fd = open[path], let inode = inodes[path] { return (fd, inode) }
        if open.count >= 256 { open.removeAll() }
        let fd = try FileDescriptor(path: directory + "/" + path, flags: O_RDWR | O_NOFOLLOW)
        let inode = Int64(try fd.status().st_ino)
        open[path] = fd
        inodes[path] = inode
        return (fd, inode)
    }
}
