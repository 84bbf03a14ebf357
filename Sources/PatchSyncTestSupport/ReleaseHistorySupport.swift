import Foundation

/// A clock some whole days ahead of the machine's, for a publisher's and its players' commands over
/// months and years: each command runs under libfaketime's wrapper, with the files' times left as the
/// kernel writes them (`NO_FAKE_STAT`), as on a machine whose clock reads that day. ``FileTimes`` gives
/// the files a command wrote the time this clock read, where a test needs the two to agree.
public struct ShiftedClock: Sendable {
    /// How far ahead of the machine's clock this one is, in seconds.
    public private(set) var offset = 0

    /// A file that always says this clock's offset (`+SECONDS`), for a server that follows the clock
    /// (``S3Server/init(bucket:clockFile:)``).
    public let file: String?

    public init(file: String? = nil) throws {
        self.file = file
        try publish()
    }

    public mutating func advance(days: Int) throws {
        offset += days * 86400
        try publish()
    }

    private func publish() throws {
        guard let file else { return }
        try Data("+\(offset)\n".utf8).write(to: URL(fileURLWithPath: file), options: .atomic)
    }

    /// The time this clock reads now.
    public var now: Date { Date(timeIntervalSinceNow: TimeInterval(offset)) }

    /// The faketime wrapper keeps a named semaphore and shared memory per pid (`/dev/shm/sem.faketime_sem_PID`,
    /// `faketime_shm_PID`); a wrapper killed before it removed them makes a later one given that pid fail
    /// ("sem_open: File exists"). Those of pids that no longer run are removed first.
    public static func removeStaleSemaphores() {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm")) ?? [] {
            guard
                let range = name.range(
                    of: "faketime_", options: .anchored,
                    range: name.index(name.startIndex, offsetBy: name.hasPrefix("sem.") ? 4 : 0)..<name.endIndex),
                let pid = Int32(name[range.upperBound...].split(separator: "_").last ?? "")
            else { continue }
            if kill(pid, 0) != 0 && errno == ESRCH { try? FileManager.default.removeItem(atPath: "/dev/shm/" + name) }
        }
    }

    /// strace, which kills a command at its n-th unlink(2) for ``run(_:_:environment:killAtUnlink:)``.
    public static let strace = "/usr/bin/strace"

    /// Runs `program ARGS…` to completion at this clock, with `environment` added; stdout and stderr are
    /// captured together in `stdout`. With `killAtUnlink`, the program is killed (SIGKILL, by strace) when
    /// it makes its n-th unlink(2), before the file goes: a command stopped half way through its
    /// deletions. A command killed so exits by the signal and prints nothing more.
    public func run(
        _ program: String, _ arguments: [String], environment: [String: String] = [:], killAtUnlink: Int? = nil
    ) throws -> CLI.Result {
        Self.removeStaleSemaphores()
        let command =
            ["NO_FAKE_STAT=1"] + environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            + ["/usr/bin/faketime", "-f", "+\(offset)", program] + arguments
        guard let killAtUnlink, FileManager.default.isExecutableFile(atPath: Self.strace) else {
            return try CLI.runProgram("/usr/bin/env", command)
        }
        return try CLI.runProgram(
            Self.strace,
            [
                "-f", "-qq", "-o", "/dev/null", "-e", "trace=unlink,unlinkat",
                "-e", "inject=unlink,unlinkat:signal=KILL:when=\(killAtUnlink)", "/usr/bin/env"
            ] + command)
    }
}

/// The modification times of the regular files under a folder, so that the files a command wrote or
/// changed can be given the time of a ``ShiftedClock``: what a machine whose kernel clock reads that day
/// would have written, and what `repo prune` reads to know when a metadata version stopped being current.
public enum FileTimes {
    /// Each regular file under `folder` (relative path, links not followed) → its modification time.
    public static func read(_ folder: String) -> [String: String] {
        var times: [String: String] = [:]
        guard let walker = FileManager.default.enumerator(atPath: folder) else { return times }
        while let path = walker.nextObject() as? String {
            var st = stat()
            guard lstat(folder + "/" + path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            times[path] = "\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
        }
        return times
    }

    /// Sets the modification time of every regular file under `folder` that is new or changed since
    /// `before` (a ``read(_:)``) to `date`; returns how many files it stamped.
    @discardableResult
    public static func stamp(_ folder: String, since before: [String: String], at date: Date) throws -> Int {
        var stamped = 0
        for (path, time) in read(folder) where before[path] != time {
            try FileManager.default.setAttributes([.modificationDate: date], ofItemAtPath: folder + "/" + path)
            stamped += 1
        }
        return stamped
    }
}
