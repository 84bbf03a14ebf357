internal import CLinux
import Foundation

/// An flock(2) on a lock file, held until the value is released: the library's one wrapper of flock.
/// The lock goes with the process (no stale lock after a kill); `deinit` unlocks explicitly, since a child
/// forked by another thread may still share the descriptor until it execs, and closing ours alone would
/// leave the lock held until then.
final class FileLock: Sendable {
    let file: FileDescriptor

    private init(_ file: FileDescriptor) { self.file = file }

    deinit { flock(file.fd, LOCK_UN) }

    /// Opens `path` (created with `mode`, never through a link) and takes the lock exclusively without
    /// waiting; nil when another process holds it.
    static func tryExclusive(_ path: String, mode: mode_t = 0o600) throws(Errno) -> FileLock? {
        try tryExclusive(FileDescriptor(path: path, flags: O_RDWR | O_CREAT | O_NOFOLLOW, mode: mode))
    }

    /// Takes the lock on an open `file` exclusively without waiting; nil when it cannot be had now: another
    /// process holds it, or flock fails otherwise (ENOLCK on a network folder), which the callers tell as busy.
    static func tryExclusive(_ file: FileDescriptor) -> FileLock? {
        while flock(file.fd, LOCK_EX | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            return nil
        }
        return FileLock(file)
    }

    /// Takes the lock on `file` exclusively, waiting up to `wait` seconds for a holder elsewhere (polled
    /// every `poll`: flock(2) itself cannot time out without a signal); nil when it is still held then.
    /// `now` is the clock the wait is measured on.
    static func exclusive(
        _ file: FileDescriptor, waiting wait: TimeInterval, poll: Duration = .milliseconds(100),
        now: () -> Date = Date.init
    ) -> FileLock? {
        let deadline = now().addingTimeInterval(wait)
        while true {
            if let lock = tryExclusive(file) { return lock }
            guard now() < deadline else { return nil }
            Thread.sleep(forTimeInterval: poll.inSeconds)
        }
    }

    /// Opens `path` (created with `mode`) and waits as long as it takes for the lock; nil when the file
    /// cannot be opened (a read-only folder: what the lock guards then fails on its own).
    static func waitExclusive(_ path: String, mode: mode_t = 0o600) -> FileLock? {
        guard let file = try? FileDescriptor(path: path, flags: O_RDWR | O_CREAT | O_NOFOLLOW, mode: mode) else {
            return nil
        }
        while flock(file.fd, LOCK_EX) != 0 {
            guard errno == EINTR else { return nil }
        }
        return FileLock(file)
    }

    /// Whether a process holds an flock on `path` now (a shared lock cannot be had); takes none.
    static func isHeld(_ path: String) -> Bool {
        guard let file = try? FileDescriptor(path: path, flags: O_RDONLY | O_NOFOLLOW) else { return false }
        if flock(file.fd, LOCK_SH | LOCK_NB) == 0 {
            flock(file.fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK
    }
}
