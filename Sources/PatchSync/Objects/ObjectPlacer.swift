import Foundation

/// Puts a publish's new objects in place while it is still writing others, so the disk works while
/// the cores chunk and deflate, instead of after.
///
/// Each batch: one syncfs(2) makes the batch's bytes durable, then each object is renamed to its path
/// (an object path never names an incomplete object). ``finish()`` places the rest and syncs once
/// more, which makes every rename durable before the caller writes the manifest that names them. An
/// object twice (the same content in two files) is placed once; a file already at an object's path
/// (left by a publish that stopped before its manifest) is replaced.
///
/// Thread-safety: `condition` guards the queue and the flags; the placing thread alone touches
/// `placed`, `dropped`, `folders` and `failure` until `finished` is signalled.
final class ObjectPlacer: @unchecked Sendable {
    /// The origin's objects folder.
    private let folder: String
    private let condition = NSCondition()
    private var queue: [ObjectWriter.Pending] = []
    private var finishing = false
    private var placed = Set<String>(), dropped = Set<String>(), folders = Set<String>()
    private var failure: Errno?
    private let finished = DispatchSemaphore(value: 0)
    /// Objects per syncfs: enough that the sync costs little per object, few enough that the disk
    /// starts early.
    private let batch: Int

    init(origin: String, batch: Int = 1024) {
        folder = origin + "/objects"
        self.batch = max(1, batch)
        let thread = Thread { [self] in run() }
        thread.name = "patchsync-place"
        thread.start()
    }

    /// Queues a written object (any thread).
    func add(_ pending: ObjectWriter.Pending) {
        condition.withLock {
            queue.append(pending)
            if queue.count >= batch { condition.signal() }
        }
    }

    /// Places what is queued and makes every rename durable; returns the temporary files dropped as
    /// duplicates. Call once, after the last ``add(_:)``.
    func finish() throws(Errno) -> Set<String> {
        condition.withLock {
            finishing = true
            condition.signal()
        }
        finished.wait()
        if let failure { throw failure }
        return dropped
    }

    private func run() {
        while true {
            let (objects, last) = condition.withLock {
                while queue.count < batch && !finishing { condition.wait() }
                defer { queue = [] }
                return (queue, finishing)
            }
            if failure == nil {
                do throws(Errno) {
                    if !objects.isEmpty { try place(objects) }
                    if last { try FileSystem.syncFileSystem(of: folder) }
                } catch { failure = error }
            }
            if last { break }
        }
        finished.signal()
    }

    private func place(_ batch: [ObjectWriter.Pending]) throws(Errno) {
        try FileSystem.syncFileSystem(of: folder)
        for object in batch {
            guard placed.insert(object.final).inserted else {
                try FileSystem.remove(object.temp)
                dropped.insert(object.temp)
                continue
            }
            let folder = (object.final as NSString).deletingLastPathComponent
            if folders.insert(folder).inserted { try FileSystem.makeDirectory(folder) }
            try FileSystem.rename(object.temp, object.final)
        }
    }
}
