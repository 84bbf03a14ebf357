internal import CLinux
import Foundation

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
    private let file: FileDescriptor

    /// Takes the lock without waiting; a holder elsewhere makes it fail as deferred (exit 75).
    public init(origin: String, purpose: String) throws(PatchSyncError) {
        let path = OriginLayout(root: origin).lockFile
        do { file = try FileDescriptor(path: path, flags: O_RDONLY | O_CREAT | O_NOFOLLOW, mode: 0o664) } catch {
            throw PatchSyncError.wrap(error).during("locking \(origin) for \(purpose)")
        }
        guard flock(file.fd, LOCK_EX | LOCK_NB) == 0 else {
            throw PatchSyncError(
                .deferred, "another patchsync command is writing \(origin) (\(path) is locked); \(purpose) must wait",
                remedy: "run it again when that publish, refresh or prune has finished")
        }
    }

    deinit { flock(file.fd, LOCK_UN) }
}
