internal import CLinux
import Foundation

/// The install's locks, one per thing two agents could both want to change:
///
/// - `.patchsync/staging.lock` (flock, exclusive): the staging area. A sync or a repair holds it
///   while it assembles a deployment; it never guards the live tree.
/// - `.patchsync/lock` (flock, exclusive): the live tree (`current`, `builds/`, `trash/`). Apply,
///   rollback and verify hold it for their few steps; a sync takes it only to empty trash/.
/// - `.patchsync/running.lock` (an open file description lock): shared while a game runs (the game
///   inherits it); exclusive across a swap, so a game never starts between the check and the flip.
///
/// Lock files are 0600 inside a 0700 `.patchsync`: another local user cannot lock them.
enum InstallLockKind: Sendable {
    case staging, live

    /// What the holder of the lock is doing, for the message of one that has to wait.
    var holder: String {
        self == .staging
            ? "another sync or repair is staging a build" : "another PatchSync process is changing the live build"
    }
}

/// An flock(2) (``FileLock``) held on one of the install's lock files until the value is released.
final class InstallLock: Sendable {
    private let lock: FileLock

    /// Takes the lock without waiting, or fails as deferred when another process holds it.
    init(path: String, kind: InstallLockKind, purpose: String) throws(PatchSyncError) {
        let held: FileLock?
        do { held = FileLock.tryExclusive(try Self.open(path)) } catch { throw PatchSyncError.wrap(error) }
        guard let held else {
            throw PatchSyncError(
                .deferred, "\(kind.holder) (\(path) is locked); \(purpose) must wait",
                remedy: "try again when it has finished; `patchsync status` shows what runs",
                reason: kind == .staging ? .otherSync : .busy)
        }
        lock = held
    }

    /// Opens (creating) a lock file, private to its owner.
    static func open(_ path: String) throws(PatchSyncError) -> FileDescriptor {
        let file: FileDescriptor
        do { file = try FileDescriptor(path: path, flags: O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600) } catch {
            throw PatchSyncError.wrap(error)
        }
        var st = stat()
        if fstat(file.fd, &st) == 0, st.st_mode & 0o077 != 0, st.st_uid == geteuid() { fchmod(file.fd, 0o600) }
        return file
    }
}

/// A lock on `running.lock` (fcntl open file description lock): shared while the game runs, so
/// several instances may run; exclusive across a swap. The shared one's descriptor is inherited
/// by the game, so the lock outlives a launcher that dies first.
public final class RunningLock: Sendable {
    private let file: FileDescriptor

    private init(file: FileDescriptor) { self.file = file }

    /// Takes the shared lock for a game, waiting while a swap holds it (milliseconds).
    static func shared(path: String) throws(PatchSyncError) -> RunningLock {
        let file = try InstallLock.open(path)
        while clinux_ofd_lock(file.fd, 0, 1) != 0 {
            guard errno == EINTR else { throw PatchSyncError.wrap(Errno(errno, "locking", path)) }
        }
        _ = fcntl(file.fd, F_SETFD, 0)  // clear FD_CLOEXEC: the game keeps the lock while it runs
        return RunningLock(file: file)
    }

    /// Takes the lock exclusively without waiting: nil while a game (or another swap) holds it.
    static func exclusive(path: String) throws(PatchSyncError) -> RunningLock? {
        let file = try InstallLock.open(path)
        guard clinux_ofd_lock(file.fd, 1, 0) == 0 else {
            guard errno == EAGAIN || errno == EACCES else { throw PatchSyncError.wrap(Errno(errno, "locking", path)) }
            return nil
        }
        return RunningLock(file: file)
    }

    /// Whether any process holds a lock on `path` (a game runs, or a swap is under way); takes none.
    static func isHeld(path: String) -> Bool {
        guard FileSystem.exists(path), let file = try? FileDescriptor(path: path, flags: O_RDONLY | O_NOFOLLOW) else {
            return false
        }
        return clinux_ofd_locked(file.fd) == 1
    }
}

extension Install {
    /// Takes one of the install's exclusive locks, or fails as deferred when another process holds it.
    func lock(_ kind: InstallLockKind, for purpose: String) throws(PatchSyncError) -> InstallLock {
        try refuseLinkedFolder(stateDirectory)
        let lock = try InstallLock(path: layout.lockFile(kind), kind: kind, purpose: purpose)
        try removePlantedLinks()
        return lock
    }

    /// The folders PatchSync rebuilds at will (staging, trash, delta packs, preloaded ranges) are its own:
    /// one replaced by a link (to the player's files, to another disk) is removed, never followed, and made
    /// anew when needed, so no deletion or write there reaches outside the install. The folders it cannot
    /// rebuild (builds, trusted metadata, the manifests of kept builds) are refused when linked. Called with
    /// a lock held, before anything works there.
    func removePlantedLinks() throws(PatchSyncError) {
        for folder in [buildsDirectory, metadataDirectory, manifestsDirectory] { try refuseLinkedFolder(folder) }
        for folder in [stagingDirectory, trashDirectory, deltasDirectory, preloadDirectory] {
            var st = stat()
            guard lstat(folder, &st) == 0, (st.st_mode & S_IFMT) != S_IFDIR else { continue }
            guard unlink(folder) == 0 || errno == ENOENT else {
                throw PatchSyncError.wrap(Errno(errno, "removing what stands in place of the folder", folder))
            }
        }
    }

    /// `.patchsync`, `builds/` and what cannot be fetched again hold the state and every kept build: a link
    /// there is refused with what to do, never followed (an apply would move builds into it and
    /// housekeeping delete there).
    private func refuseLinkedFolder(_ folder: String) throws(PatchSyncError) {
        var st = stat()
        guard lstat(folder, &st) == 0, (st.st_mode & S_IFMT) == S_IFLNK else { return }
        throw PatchSyncError(
            .localIO,
            "\(folder) is a symbolic link; PatchSync keeps its builds and state inside the install "
                + "and never works through a link there",
            remedy:
                "move the whole install folder instead (`patchsync` follows it), or replace the link by the folder it points to"
        )
    }

    /// True while a game launched through PatchSync holds `running.lock` (or a swap is under way).
    public func gameIsRunning() -> Bool { RunningLock.isHeld(path: runningLockPath) }

    /// Holds `running.lock` shared until the value is released: the game is running, and apply and
    /// rollback refuse to swap the tree meanwhile.
    public func holdRunningLock() throws(PatchSyncError) -> RunningLock {
        try RunningLock.shared(path: runningLockPath)
    }

    /// `.patchsync` is private to the install's owner (0700).
    func securePrivateFolder() {
        var st = stat()
        if stat(stateDirectory, &st) == 0, st.st_mode & 0o077 != 0, st.st_uid == geteuid() {
            chmod(stateDirectory, 0o700)
        }
    }
}
