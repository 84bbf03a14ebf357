import Foundation
import Synchronization

/// Puts a publish's new objects in place while it is still writing others, so the disk works while
/// the cores chunk and deflate, instead of after.
///
/// Each batch: one syncfs(2) makes the batch's bytes durable, then each object is renamed to its path
/// (an object path never names an incomplete object). ``finish()`` places the rest and syncs once
/// more, which makes every rename durable before the caller writes the manifest that names them. An
/// object twice (the same content in two files) is placed once; a file already at an object's path
/// (left by a publish that stopped before its manifest) is replaced.
///
/// Thread-safety: a ``ConditionLock`` holds the queue and the flags, and is what the placing thread
/// (for a batch) and ``finish()`` (for the end) wait on. A `Mutex` holds what the placing thread
/// records (`placed`, `dropped`, `folders`, `failure`): the placing thread holds it while it places a
/// batch, and ``finish()`` reads it once the placing thread has ended.
final class ObjectPlacer: Sendable {
    /// What the adding threads, the placing thread and ``finish()`` share.
    private struct Queue {
        var objects: [ObjectWriter.Pending] = []
        var finishing = false
        var finished = false
    }

    /// What the placing thread records as it places.
    private struct Placing {
        var placed = Set<String>(), dropped = Set<String>(), folders = Set<String>()
        var failure: Errno?
    }

    /// The origin's objects folder.
    private let folder: String
    private let lock = ConditionLock(Queue())
    private let placing = Mutex(Placing())
    /// Objects per syncfs: enough that the sync costs little per object, few enough that the disk
    /// starts early.
    private let batch: Int

    init(origin: String, batch: Int = 1024) {
        folder = OriginLayout(root: origin).objectsFolder
        self.batch = max(1, batch)
        let thread = Thread { [self] in run() }
        thread.name = "patchsync-place"
        thread.start()
    }

    /// Queues a written object (any thread).
    func add(_ pending: ObjectWriter.Pending) {
        lock.withLock { queue in
            queue.objects.append(pending)
            if queue.objects.count >= batch { lock.signal() }
        }
    }

    /// Places what is queued and makes every rename durable; returns the temporary files dropped as
    /// duplicates. Call once, after the last ``add(_:)``.
    func finish() throws(Errno) -> Set<String> {
        lock.withLock { queue in
            queue.finishing = true
            lock.signal()
        }
        lock.withLock(when: { $0.finished }) { _ in }
        let (failure, dropped) = placing.withLock { ($0.failure, $0.dropped) }
        if let failure { throw failure }
        return dropped
    }

    private func run() {
        while true {
            let (objects, last) = lock.withLock(when: { $0.objects.count >= batch || $0.finishing }) {
                queue -> ([ObjectWriter.Pending], Bool) in
                defer { queue.objects = [] }
                return (queue.objects, queue.finishing)
            }
            placing.withLock { placing in
                guard placing.failure == nil else { return }
                do throws(Errno) {
                    if !objects.isEmpty { try place(objects, recording: &placing) }
                    if last { try FileSystem.syncFileSystem(of: folder) }
                } catch { placing.failure = error }
            }
            if last { break }
        }
        lock.withLock { queue in
            queue.finished = true
            lock.broadcast()
        }
    }

    private func place(_ batch: [ObjectWriter.Pending], recording placing: inout Placing) throws(Errno) {
        try FileSystem.syncFileSystem(of: folder)
        for object in batch {
            guard placing.placed.insert(object.final).inserted else {
                try FileSystem.remove(object.temp)
                placing.dropped.insert(object.temp)
                continue
            }
            let folder = FileSystem.parent(of: object.final)
            if placing.folders.insert(folder).inserted { try FileSystem.makeDirectory(folder) }
            try FileSystem.rename(object.temp, object.final)
        }
    }
}
