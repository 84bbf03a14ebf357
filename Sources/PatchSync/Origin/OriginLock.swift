internal import CLinux
import Foundation
import Synchronization

/// An flock(2) on `<origin>/.patchsync-origin.lock`, held by every command that writes an origin's
/// metadata or deletes from it (publish, promote, rollback, refresh, renew, rotate-root, prune), from
/// the moment it reads the metadata to the moment its last file is written. Without it a publish and
/// the cron job's refresh could each sign the same snapshot version, or a prune could delete an
/// object that a publish running beside it has just decided to reuse.
///
/// The file is readable by the group, so a publisher and a cron job running as different users of
/// one group both take it; its name starts with a dot, so `upload` never copies it.
public final class OriginLock: Sendable {
    /// The lock file's name inside the origin folder.
    public static let fileName = OriginLayout.lockFileName
    private let lock: FileLock

    /// How long a command waits for the lock held elsewhere (`--wait`); 0: not at all.
    public static var wait: TimeInterval {
        get { waitSetting.withLock { $0 } }
        set { waitSetting.withLock { $0 = newValue } }
    }
    private static let waitSetting = Mutex<TimeInterval>(0)

    /// Takes the lock, waiting up to ``wait`` for a holder elsewhere; still held then, it fails as
    /// deferred (exit 75).
    public convenience init(origin: String, purpose: String) throws(PatchSyncError) {
        try self.init(origin: origin, purpose: purpose, fileName: Self.fileName, wait: Self.wait)
    }

    /// Takes the lock file `fileName` of the folder `origin`, waiting up to `wait`.
    init(origin: String, purpose: String, fileName: String, wait: TimeInterval) throws(PatchSyncError) {
        let path = OriginLayout(root: origin).path(fileName)
        let held: FileLock?
        do {
            let file = try FileDescriptor(path: path, flags: O_RDONLY | O_CREAT | O_NOFOLLOW, mode: 0o664)
            held = FileLock.exclusive(file, waiting: wait)
        } catch { throw PatchSyncError.wrap(error).during("locking \(origin) for \(purpose)") }
        guard let held else {
            throw PatchSyncError(
                .deferred,
                "another patchsync command is writing \(origin) (\(path) is locked); \(purpose) must wait"
                    + (wait > 0 ? " (waited \(Int(wait)) s)" : ""),
                remedy: "run it again when that publish, refresh or prune has finished, or give --wait 10m",
                reason: .busy)
        }
        lock = held
    }
}
