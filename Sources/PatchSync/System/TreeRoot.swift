internal import CLinux
import Foundation

/// A folder that file operations stay beneath: every path is resolved relative to a descriptor of
/// the folder (opened `O_DIRECTORY | O_NOFOLLOW`), and no component of it is ever followed through
/// a symbolic link, so a link planted anywhere below (by a user, a tool or another program) cannot
/// make a write, a link or a deletion land outside.
///
/// Lookups use openat2(2) with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it, and
/// otherwise walk the path one `openat(…, O_NOFOLLOW)` at a time. A lookup that meets a link finds
/// nothing there; ``makeFolder(_:)`` removes a link or file that stands where a folder belongs.
///
/// Thread-safety: immutable after init; the descriptor is only read (the *at calls are thread-safe).
final class TreeRoot: Sendable {
    /// The folder's path, for messages and for callers that still need an absolute path.
    let path: String
    private let root: FileDescriptor

    /// Opens `path` itself, refusing a symbolic link there.
    init(_ path: String) throws(Errno) {
        root = try FileDescriptor(path: path, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        self.path = path
    }

    /// syncfs(2) through the tree's own descriptor: Linux reports the writeback errors of the file
    /// system since that descriptor was opened (when the tree was opened, before its files were
    /// written), where a descriptor opened now would report none of them.
    func syncFileSystem() throws(Errno) {
        try FileSystem.syncFileSystem(descriptor: root, path: path)
    }

    private init(adopting descriptor: FileDescriptor, path: String) {
        root = descriptor
        self.path = path
    }

    /// The tree below `relative` (created as ``makeFolder(_:)`` does).
    func subtree(_ relative: String) throws(Errno) -> TreeRoot {
        TreeRoot(adopting: try makeFolder(relative), path: full(relative))
    }

    /// `path/relative`, for messages.
    func full(_ relative: String) -> String { relative.isEmpty ? path : path + "/" + relative }

    /// The folder at `relative` (the root for ""), or nil when a component is missing, a link or not
    /// a folder.
    func folder(_ relative: String) throws(Errno) -> FileDescriptor? {
        if relative.isEmpty { return root }
        let fd = clinux_openat2_beneath(root.fd, relative, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0)
        if fd >= 0 { return FileDescriptor(adopting: fd, path: full(relative)) }
        switch errno {
        case ENOENT, ENOTDIR, ELOOP, EXDEV: return nil
        case ENOSYS, EPERM: return try walk(relative, creating: false)  // no openat2 here
        default: throw Errno(errno, "opening folder", full(relative))
        }
    }

    /// The folder at `relative`, made with its parents where missing; a link or a file in the way
    /// is removed (never followed) and a folder made in its place.
    @discardableResult
    func makeFolder(_ relative: String, mode: mode_t = 0o755) throws(Errno) -> FileDescriptor {
        if let existing = try folder(relative) { return existing }
        guard let made = try walk(relative, creating: true, mode: mode) else {
            throw Errno(ENOTDIR, "creating folder", full(relative))
        }
        return made
    }

    /// Opens each component of `relative` in turn with `O_NOFOLLOW`; with `creating`, makes what is
    /// missing and replaces what is not a folder.
    private func walk(_ relative: String, creating: Bool, mode: mode_t = 0o755) throws(Errno) -> FileDescriptor? {
        var current = root
        var walked = ""
        for component in PathRule.components(relative) {
            guard PathRule.isPlainComponent(component) else { throw Errno(EINVAL, "resolving", full(relative)) }
            walked += walked.isEmpty ? component : "/" + component
            var fd = openat(current.fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd < 0 {
                let err = errno
                guard creating, err == ENOENT || err == ENOTDIR || err == ELOOP else {
                    if err == ENOENT || err == ENOTDIR || err == ELOOP { return nil }
                    throw Errno(err, "opening folder", full(walked))
                }
                // EISDIR: another thread of this run removed what stood there and made the folder first.
                if err != ENOENT, unlinkat(current.fd, component, 0) != 0, errno != ENOENT, errno != EISDIR {
                    throw Errno(errno, "removing what stands where a folder belongs", full(walked))
                }
                if mkdirat(current.fd, component, mode) != 0, errno != EEXIST {
                    throw Errno(errno, "creating folder", full(walked))
                }
                fd = openat(current.fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if fd < 0 { throw Errno(errno, "opening folder", full(walked)) }
            }
            current = FileDescriptor(adopting: fd, path: full(walked))
        }
        return current
    }

    /// The folder holding `relative` and the last component's name; nil when that folder cannot be
    /// reached without following a link.
    private func parent(_ relative: String) throws(Errno) -> (FileDescriptor, String)? {
        let (folderPath, name) = PathRule.split(relative)
        guard PathRule.isPlainComponent(name) else { throw Errno(EINVAL, "resolving", full(relative)) }
        guard let folder = try folder(folderPath) else { return nil }
        return (folder, name)
    }

    /// The parent folder of `relative`, made as ``makeFolder(_:)`` does, and the last component.
    private func makeParent(_ relative: String) throws(Errno) -> (FileDescriptor, String) {
        let (folderPath, name) = PathRule.split(relative)
        guard PathRule.isPlainComponent(name) else { throw Errno(EINVAL, "resolving", full(relative)) }
        return (try makeFolder(folderPath), name)
    }

    /// The last folder a run of operations over paths in order resolved, kept open for the next path
    /// in the same folder: a build's files come sorted, so a run of 200,000 links or stats opens each
    /// folder once instead of once per file. Valid for one run by one caller, while nothing else
    /// replaces the tree's folders (the staging lock).
    struct FolderMemo {
        fileprivate var path: String?
        fileprivate var folder: FileDescriptor?

        init() {}

        fileprivate init(path: String, folder: FileDescriptor) {
            self.path = path
            self.folder = folder
        }
    }

    /// ``makeParent(_:)`` through `memo`.
    private func makeParent(_ relative: String, memo: inout FolderMemo) throws(Errno) -> (FileDescriptor, String) {
        let (folderPath, name) = PathRule.split(relative)
        guard PathRule.isPlainComponent(name) else { throw Errno(EINVAL, "resolving", full(relative)) }
        if memo.path == folderPath, let folder = memo.folder { return (folder, name) }
        let folder = try makeFolder(folderPath)
        memo = FolderMemo(path: folderPath, folder: folder)
        return (folder, name)
    }

    /// ``parent(_:)`` through `memo`.
    private func parent(_ relative: String, memo: inout FolderMemo) throws(Errno) -> (FileDescriptor, String)? {
        let (folderPath, name) = PathRule.split(relative)
        guard PathRule.isPlainComponent(name) else { throw Errno(EINVAL, "resolving", full(relative)) }
        if memo.path == folderPath, let folder = memo.folder { return (folder, name) }
        guard let folder = try folder(folderPath) else { return nil }
        memo = FolderMemo(path: folderPath, folder: folder)
        return (folder, name)
    }

    /// fstatat(2) without following a link; nil when nothing is there (or a link hides the parent).
    func status(_ relative: String) throws(Errno) -> stat? {
        var memo = FolderMemo()
        return try status(relative, memo: &memo)
    }

    /// ``status(_:)``, its folder resolved through `memo` (a run over paths in order).
    func status(_ relative: String, memo: inout FolderMemo) throws(Errno) -> stat? {
        var st = stat()
        if relative.isEmpty { return try root.status() }
        guard let (folder, name) = try parent(relative, memo: &memo) else { return nil }
        if fstatat(folder.fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 { return st }
        if errno == ENOENT || errno == ENOTDIR { return nil }
        throw Errno(errno, "reading status of", full(relative))
    }

    /// unlinkat(2) of a file or link; nothing there is not an error, and a path whose parent is
    /// reached only through a link has nothing of this tree to remove.
    func remove(_ relative: String) throws(Errno) {
        guard let (folder, name) = try parent(relative) else { return }
        if unlinkat(folder.fd, name, 0) != 0 && errno != ENOENT { throw Errno(errno, "removing", full(relative)) }
    }

    /// Removes whatever is at `relative`: a file, a link (not what it points to) or a whole folder.
    func removeTree(_ relative: String) throws(Errno) {
        guard let (folder, name) = try parent(relative) else { return }
        try Self.removeEntry(name, in: folder)
    }

    /// Removes every entry below the root whose relative path is not in `keep` (files, links, folders
    /// with all they hold), descending only into kept real folders; returns the paths removed.
    /// With `folders` (the kept paths that are folders), only those are descended into; without, every
    /// kept entry that readdir does not say is something else.
    @discardableResult
    func removeAll(except keep: Set<String>, folders: Set<String>? = nil) throws(Errno) -> [String] {
        // Compared by bytes, as the kernel names them: Swift's String equality would take an NFD twin of a
        // kept name for it (so a match is checked byte for byte), and a name that is not UTF-8 is no
        // manifest path (so it goes).
        func holds(_ set: Set<String>, _ relative: String) -> Bool {
            guard let found = set.firstIndex(of: relative) else { return false }
            return set[found].utf8.elementsEqual(relative.utf8)
        }
        var removed: [String] = []
        func sweep(_ folder: FileDescriptor, _ prefix: String) throws(Errno) {
            for (raw, notFolder) in try folder.rawEntries() {
                let bytes = raw.dropLast().map { UInt8(bitPattern: $0) }
                let name = String(validating: bytes, as: UTF8.self)
                let relative = name.map { prefix.isEmpty ? $0 : prefix + "/" + $0 }
                guard let relative, holds(keep, relative) else {
                    try Self.removeEntry(raw: raw, in: folder)
                    removed.append(
                        relative ?? (prefix.isEmpty ? "" : prefix + "/") + String(decoding: bytes, as: UTF8.self))
                    continue
                }
                if let folders { if !holds(folders, relative) { continue } } else if notFolder { continue }
                let fd = openat(folder.fd, raw, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if fd >= 0 {
                    try sweep(FileDescriptor(adopting: fd, path: folder.path + "/" + (name ?? "")), relative)
                }
            }
        }
        try sweep(root, "")
        return removed
    }

    private static func removeEntry(_ name: String, in folder: FileDescriptor) throws(Errno) {
        try removeEntry(raw: Array(name.utf8CString), in: folder)
    }

    /// Removes the entry named by the bytes `raw` (NUL-terminated, as readdir gave them: a name that is not
    /// UTF-8 is removed too) in `folder`, a whole folder with all it holds, never following a link.
    static func removeEntry(raw name: [CChar], in folder: FileDescriptor) throws(Errno) {
        let shown =
            folder.path + "/" + String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var st = stat()
        guard fstatat(folder.fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return }
            throw Errno(errno, "reading status of", shown)
        }
        guard (st.st_mode & S_IFMT) == S_IFDIR else {
            if unlinkat(folder.fd, name, 0) != 0 && errno != ENOENT { throw Errno(errno, "removing", shown) }
            return
        }
        _ = fchmodat(folder.fd, name, 0o755, 0)
        let fd = openat(folder.fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return }  // another process deleted it meanwhile
            throw Errno(errno, "opening folder", shown)
        }
        let child = FileDescriptor(adopting: fd, path: shown)
        for entry in try child.rawNames() { try removeEntry(raw: entry, in: child) }
        if unlinkat(folder.fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT {
            throw Errno(errno, "removing folder", shown)
        }
    }

    /// openat(2) of `relative` with `O_NOFOLLOW`; with `O_CREAT`, its folder is made first.
    func open(_ relative: String, flags: Int32, mode: mode_t = 0o600) throws(Errno) -> FileDescriptor {
        let (folder, name): (FileDescriptor, String)
        if flags & O_CREAT != 0 {
            (folder, name) = try makeParent(relative)
        } else {
            guard let found = try parent(relative) else { throw Errno(ENOENT, "opening", full(relative)) }
            (folder, name) = found
        }
        let fd = openat(folder.fd, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { throw Errno(errno, "opening", full(relative)) }
        return FileDescriptor(adopting: fd, path: full(relative))
    }

    /// linkat(2): a hard link at `relative` to the file `source` of `tree` (not following a link
    /// there either); the folder is made first.
    func link(_ source: String, of tree: TreeRoot, to relative: String) throws(Errno) {
        guard let (from, fromName) = try tree.parent(source) else { throw Errno(ENOENT, "linking", tree.full(source)) }
        let (folder, name) = try makeParent(relative)
        if linkat(from.fd, fromName, folder.fd, name, 0) != 0 {
            throw Errno(errno, "linking \(tree.full(source)) to", full(relative))
        }
    }

    /// linkat(2): a hard link at `relative` to the file at the path `source` (outside this tree: the
    /// live build's verified file); the folder is made first.
    func linkFile(at source: String, to relative: String) throws(Errno) {
        var memo = FolderMemo()
        try linkFile(at: source, to: relative, memo: &memo)
    }

    /// ``linkFile(at:to:)``, its folder resolved through `memo` (a run over paths in order).
    func linkFile(at source: String, to relative: String, memo: inout FolderMemo) throws(Errno) {
        let (folder, name) = try makeParent(relative, memo: &memo)
        if linkat(AT_FDCWD, source, folder.fd, name, 0) != 0 {
            throw Errno(errno, "linking \(source) to", full(relative))
        }
    }

    /// renameat(2): the entry at `relative` moves to `destination` in `other` (its folder made first),
    /// both resolved beneath their trees' descriptors, `relative`'s folder through `memo`.
    func move(_ relative: String, to other: TreeRoot, _ destination: String, memo: inout FolderMemo) throws(Errno) {
        guard let (from, name) = try parent(relative, memo: &memo) else {
            throw Errno(ENOENT, "moving", full(relative))
        }
        let (folder, target) = try other.makeParent(destination)
        if renameat(from.fd, name, folder.fd, target) != 0 {
            throw Errno(errno, "moving \(full(relative)) to", other.full(destination))
        }
    }

    /// Sets the permission bits of the regular file at `relative` (through a descriptor, so a link
    /// there is never followed).
    func setMode(_ relative: String, _ mode: mode_t) throws(Errno) {
        var memo = FolderMemo()
        try setMode(relative, mode, memo: &memo)
    }

    /// ``setMode(_:_:)``, its folder resolved through `memo` (a run over paths in order).
    func setMode(_ relative: String, _ mode: mode_t, memo: inout FolderMemo) throws(Errno) {
        guard let (folder, name) = try parent(relative, memo: &memo) else {
            throw Errno(ENOENT, "changing mode of", full(relative))
        }
        let fd = openat(folder.fd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw Errno(errno, "changing mode of", full(relative)) }
        let file = FileDescriptor(adopting: fd, path: full(relative))
        guard (try file.status().st_mode & S_IFMT) == S_IFREG else {
            throw Errno(EINVAL, "changing mode of", full(relative))
        }
        if fchmod(file.fd, mode) != 0 { throw Errno(errno, "changing mode of", full(relative)) }
    }

    /// symlinkat(2): a symbolic link at `relative` to `target`; its folder is made first.
    func makeLink(_ relative: String, to target: String) throws(Errno) {
        let (folder, name) = try makeParent(relative)
        if symlinkat(target, folder.fd, name) != 0 { throw Errno(errno, "creating the symbolic link", full(relative)) }
    }

    /// readlinkat(2) of the link at `relative`.
    func readLink(_ relative: String) throws(Errno) -> String {
        guard let (folder, name) = try parent(relative) else { throw Errno(ENOENT, "reading link", full(relative)) }
        var buffer = [UInt8](repeating: 0, count: 4097)
        let n = readlinkat(folder.fd, name, &buffer, buffer.count)
        guard n >= 0 else { throw Errno(errno, "reading link", full(relative)) }
        return String(decoding: buffer[..<n], as: UTF8.self)
    }
}

extension FileDescriptor {
    /// Takes ownership of a descriptor an *at call returned.
    convenience init(adopting fd: Int32, path: String) {
        self.init(owning: fd, path: path)
    }

    /// The names in this folder as readdir gives them (NUL-terminated bytes, whatever their encoding),
    /// without "." and "..".
    func rawNames() throws(Errno) -> [[CChar]] { try rawEntries().map(\.name) }

    /// ``rawNames()`` with whether readdir says each is surely not a folder (its `d_type`; a file
    /// system that does not say leaves it false, to be looked at).
    func rawEntries() throws(Errno) -> [(name: [CChar], notFolder: Bool)] {
        let copy = dup(fd)
        guard copy >= 0, let dir = fdopendir(copy) else { throw Errno(errno, "listing", path) }
        defer { closedir(dir) }
        rewinddir(dir)
        var entries: [(name: [CChar], notFolder: Bool)] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                Array(raw.prefix { $0 != 0 }.map { CChar(bitPattern: $0) }) + [0]
            }
            let type = entry.pointee.d_type
            let notFolder = type != UInt8(DT_DIR) && type != UInt8(DT_UNKNOWN)
            if name != [46, 0] && name != [46, 46, 0] { entries.append((name, notFolder)) }
        }
        return entries
    }

    /// The names in this folder, without "." and "..".
    func names() throws(Errno) -> [String] {
        let copy = dup(fd)
        guard copy >= 0, let dir = fdopendir(copy) else { throw Errno(errno, "listing", path) }
        defer { closedir(dir) }
        rewinddir(dir)
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
