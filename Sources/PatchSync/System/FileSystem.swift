import Foundation

/// Small file-system steps, each a thin typed wrapper over the system call it names.
enum FileSystem {
    /// The folder part of `path`: what precedes its last "/" ("/" for a top-level absolute path, ""
    /// for a bare name). Paths here are plain (no trailing or doubled slashes), so this skips
    /// Foundation's path normalization, which a fresh install would run for each of its files.
    static func parent(of path: String) -> String {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")) else { return "" }
        return slash == path.utf8.startIndex ? "/" : String(path[..<slash])
    }

    /// Creates `path` and its parents (mkdir -p).
    static func makeDirectory(_ path: String, mode: mode_t = 0o755) throws(Errno) {
        if mkdir(path, mode) == 0 { return }
        let err = errno
        if err == EEXIST, isDirectory(path) { return }
        if err == ENOENT {
            let parent = FileSystem.parent(of: path)
            guard !parent.isEmpty, parent != path else { throw Errno(err, "creating directory", path) }
            try makeDirectory(parent, mode: mode)
            if mkdir(path, mode) == 0 || (errno == EEXIST && isDirectory(path)) { return }
        }
        throw Errno(errno == 0 ? err : errno, "creating directory", path)
    }

    /// Creates `path` and its parents below `root` (which must exist) without following any
    /// symbolic link: a component that is a link or a file is removed and made a real directory,
    /// so nothing written below `path` can land outside `root`.
    static func makeDirectory(_ path: String, within root: String, mode: mode_t = 0o755) throws(Errno) {
        guard path.hasPrefix(root + "/") else {
            if path == root { return }
            throw Errno(EINVAL, "creating directory outside \(root)", path)
        }
        var current = root
        for component in path.dropFirst(root.count + 1).split(separator: "/") {
            guard component != "..", component != "." else { throw Errno(EINVAL, "creating directory", path) }
            current += "/" + component
            var st = stat()
            if lstat(current, &st) == 0 {
                if (st.st_mode & S_IFMT) == S_IFDIR { continue }
                try remove(current)  // a symbolic link or a file where a directory belongs
            }
            if mkdir(current, mode) != 0 && errno != EEXIST { throw Errno(errno, "creating directory", current) }
            guard lstat(current, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
                throw Errno(ENOTDIR, "creating directory", current)
            }
        }
    }

    /// The bytes an unprivileged writer may still use on the file system holding `path` (nil when
    /// statvfs fails).
    static func freeBytes(at path: String) -> Int64? {
        var fs = statvfs()
        guard statvfs(path, &fs) == 0 else { return nil }
        return Int64(fs.f_bavail) * Int64(fs.f_frsize)
    }

    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }

    /// lstat(2), nil when the path does not exist.
    static func status(_ path: String) throws(Errno) -> stat? {
        var st = stat()
        if lstat(path, &st) == 0 { return st }
        if errno == ENOENT || errno == ENOTDIR { return nil }
        throw Errno(errno, "reading status of", path)
    }

    /// Sets the access and modification times of `path` (links not followed) to `date`, to the second.
    static func setModified(_ path: String, to date: Date) throws(Errno) {
        let second = timespec(tv_sec: Int(date.timeIntervalSince1970.rounded(.down)), tv_nsec: 0)
        var times = [second, second]  // access and modification
        if utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW) != 0 {
            throw Errno(errno, "setting the modification time of", path)
        }
    }

    /// fsync of a directory, so that renames and creations inside it are durable.
    static func syncDirectory(_ path: String) throws(Errno) {
        let dir = try FileDescriptor(path: path, flags: O_RDONLY | O_DIRECTORY)
        try dir.sync()
    }

    /// syncfs(2) of the file system holding `path`: one call for many files' data and metadata.
    static func syncFileSystem(of path: String) throws(Errno) {
        try syncFileSystem(descriptor: try FileDescriptor(path: path, flags: O_RDONLY), path: path)
    }

    /// syncfs(2) through `descriptor` (errors since it was opened are reported).
    static func syncFileSystem(descriptor: FileDescriptor, path: String) throws(Errno) {
        guard let syncfs = Self.syncfs else {
            sync()
            return
        }
        if syncfs(descriptor.fd) != 0 { throw Errno(errno, "syncing the file system of", path) }
    }

    /// glibc's syncfs(2), which Swift's Glibc module hides behind _GNU_SOURCE; looked up once.
    private static let syncfs: (@convention(c) (Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syncfs") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32) -> Int32).self)
    }()

    /// rename(2).
    static func rename(_ from: String, _ to: String) throws(Errno) {
        if Foundation.rename(from, to) != 0 { throw Errno(errno, "renaming \(from) to", to) }
    }

    /// link(2).
    static func link(_ from: String, _ to: String) throws(Errno) {
        if Foundation.link(from, to) != 0 { throw Errno(errno, "linking \(from) to", to) }
    }

    /// unlink(2); a missing file is not an error.
    static func remove(_ path: String) throws(Errno) {
        if unlink(path) != 0 && errno != ENOENT { throw Errno(errno, "removing", path) }
    }

    /// chmod(2).
    static func setMode(_ path: String, _ mode: mode_t) throws(Errno) {
        if chmod(path, mode) != 0 { throw Errno(errno, "changing mode of", path) }
    }

    /// Removes a tree, making read-only directories writable first (rm -rf).
    static func removeTree(_ path: String) throws(Errno) {
        guard let st = try status(path) else { return }
        if (st.st_mode & S_IFMT) == S_IFDIR {
            _ = chmod(path, 0o755)
            // Beneath a descriptor, by the names' bytes: a link inside is removed, never followed, and a
            // name that is not UTF-8 is removed too.
            let folder = try FileDescriptor(path: path, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
            for name in try folder.rawNames() { try TreeRoot.removeEntry(raw: name, in: folder) }
            if rmdir(path) != 0 { throw Errno(errno, "removing directory", path) }
        } else {
            try remove(path)
        }
    }

    /// Whether `name` in `folder` is a directory (not following a link).
    static func isSubdirectory(_ name: String, of folder: String) -> Bool {
        var st = stat()
        return lstat(folder + "/" + name, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }

    /// The names of the folders in a directory (not following links), sorted: the kind comes from
    /// readdir's d_type, so only file systems that do not fill it in cost an lstat per entry.
    static func subdirectories(_ path: String) throws(Errno) -> [String] {
        try entries(path) { name, type in
            type == UInt8(DT_DIR) || (type == UInt8(DT_UNKNOWN) && isSubdirectory(name, of: path))
        }
    }

    /// The names in a directory, sorted, without "." and "..".
    static func list(_ path: String) throws(Errno) -> [String] {
        try entries(path) { _, _ in true }
    }

    /// The names in a directory (without "." and "..") that `keep` accepts given their d_type, sorted.
    private static func entries(_ path: String, _ keep: (String, UInt8) -> Bool) throws(Errno) -> [String] {
        guard let dir = opendir(path) else { throw Errno(errno, "listing", path) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != "..", keep(name, entry.pointee.d_type) { names.append(name) }
        }
        return names.sorted()
    }

    /// Writes `data` durably: temporary name, fsync, rename, fsync of the directory.
    static func writeAtomically(_ data: Data, to path: String, mode: mode_t = 0o644) throws(Errno) {
        let dir = FileSystem.parent(of: path)
        try makeDirectory(dir)
        let temp = "\(path).tmp-\(getpid())"
        do throws(Errno) {
            let file = try FileDescriptor(path: temp, flags: O_WRONLY | O_CREAT | O_TRUNC, mode: mode)
            try file.write(data)
            try file.sync()
        } catch {
            try? remove(temp)
            throw error
        }
        try rename(temp, path)
        try syncDirectory(dir)
    }

    /// Reads a whole small file, refusing one larger than `limit` bytes.
    static func read(_ path: String, limit: Int) throws(PatchSyncError) -> Data {
        let file: FileDescriptor
        do { file = try FileDescriptor(path: path, flags: O_RDONLY) } catch { throw PatchSyncError.wrap(error) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let n: Int
            do { n = try file.read(into: &buffer) } catch {
                throw PatchSyncError.wrap(error)
            }
            if n == 0 { return data }
            data.append(contentsOf: buffer[0..<n])
            if data.count > limit {
                throw PatchSyncError(.refusedData, "\(path) is larger than the \(limit) bytes allowed")
            }
        }
    }
}

extension FileSystem {
    static func readLink(_ path: String) throws(PatchSyncError) -> String {
        var buffer = [CChar](repeating: 0, count: 4097)
        let n = readlink(path, &buffer, 4096)
        guard n >= 0 else { throw PatchSyncError.wrap(Errno(errno, "reading the link", path)) }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
