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
    private var pending: [StateStore.ChunkRef] = []
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

    init(directory: String, build: String, state: StateStore) {
        self.directory = directory
        self.build = build
        self.state = state
        let thread = Thread { [self] in flushLoop() }
        thread.name = "patchsync-flush"
        thread.start()
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
        condition.withLock {
            pending += destinations.map { StateStore.ChunkRef(path: $0.path, index: $0.index) }
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
        let (refs, paths, ticket) = condition.withLock { () -> ([StateStore.ChunkRef], Set<String>, Int) in
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

    private func record(_ refs: [StateStore.ChunkRef], syncing paths: Set<String>) throws(PatchSyncError) {
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

    private func descriptor(_ path: String) throws(Errno) -> FileDescriptor {
        condition.lock()
        defer { condition.unlock() }
        if let fd = open[path] { return fd }
        if open.count >= 256 { open.removeAll() }
        let fd = try FileDescriptor(path: directory + "/" + path, flags: O_RDWR | O_NOFOLLOW)
        open[path] = fd
        return fd
    }
}
