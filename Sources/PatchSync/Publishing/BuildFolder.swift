import Foundation

/// What a build folder holds, as publish and diff record it: regular files, symbolic links that
/// resolve inside the folder, and empty folders. A link that escapes the folder or is absolute is
/// refused with its path, or, with `dereferenceExternal`, replaced by what it points to (a file,
/// or a folder walked in its place). Sockets, pipes and devices are refused.
public struct BuildFolder: Sendable {
    public var root: String
    /// Regular files (and, with `dereferenceExternal`, what escaping links point to), sorted.
    public var files: [String] = []
    /// Links kept as links: path → relative target.
    public var links: [String: String] = [:]
    /// Folders entered through a dereferenced link (device, inode): a cycle is refused, not walked forever.
    private var entered: Set<[UInt64]> = []
    /// Folders copied from outside the build by --dereference-external.
    private var copied: [String] = []
    /// Folders with nothing in them.
    public var emptyFolders: [String] = []
    /// Links that `dereferenceExternal` replaced by what they point to outside the build: path → where it points.
    public private(set) var dereferenced: [String: String] = [:]
    /// What the walk left out: the paths `exclude` matched (a folder's with a trailing slash), sorted.
    public private(set) var excluded: [String] = []
    /// The globs (as given) that left out at least one path.
    public private(set) var usedGlobs: Set<String> = []
    private var exclude = ExcludeRules.none

    /// Walks `root`; `dereferenceExternal` copies what escaping links point to instead of refusing them;
    /// what `exclude` matches is left out (and listed in ``excluded``).
    public static func scan(
        _ root: String, dereferenceExternal: Bool = false, exclude: ExcludeRules = .none
    ) throws(PatchSyncError) -> BuildFolder {
        var folder = BuildFolder(root: root)
        folder.exclude = exclude
        try folder.walk("")
        if !exclude.isEmpty { try folder.checkExclusions() }
        // Whether a link escapes depends on the other links (a chain can climb out): check them all,
        // replace the escaping ones, and check again until none escapes.
        while true {
            let resolver = LinkResolver(targets: folder.links)
            let escaping = folder.links.keys.sorted().filter { !resolver.staysInside($0) }
            guard let first = escaping.first else { break }
            guard dereferenceExternal else {
                throw PatchSyncError(
                    .usage,
                    "\(root)/\(first) is a symbolic link to '\(folder.links[first] ?? "")', "
                        + "which is absolute or resolves outside the build folder",
                    remedy: "make it a relative link inside the build, or publish with "
                        + "--dereference-external to copy what it points to")
            }
            for path in escaping {
                folder.links[path] = nil
                try folder.dereference(path)
            }
        }
        folder.files.sort()
        folder.emptyFolders.sort()
        folder.excluded.sort()
        return folder
    }

    private mutating func walk(_ relative: String) throws(PatchSyncError) {
        let full = relative.isEmpty ? root : root + "/" + relative
        let names: [String]
        do { names = try FileSystem.list(full) } catch {
            throw PatchSyncError.wrap(error).during("reading the build folder")
        }
        if names.isEmpty && !relative.isEmpty { emptyFolders.append(relative) }
        for name in names {
            let rel = relative.isEmpty ? name : relative + "/" + name
            let st: stat?
            do { st = try FileSystem.status(root + "/" + rel) } catch { throw PatchSyncError.wrap(error) }
            guard let st else { continue }
            let isFolder = st.st_mode & S_IFMT == S_IFDIR
            if let glob = exclude.match(rel, isFolder: isFolder) {
                excluded.append(isFolder ? rel + "/" : rel)
                usedGlobs.insert(glob)
                continue
            }
            switch st.st_mode & S_IFMT {
            case S_IFDIR: try walk(rel)
            case S_IFREG: files.append(rel)
            // Inside a folder copied from outside the build, a link means what it points to out there.
            case S_IFLNK where isCopied(relative): try dereference(rel)
            case S_IFLNK: links[rel] = try FileSystem.readLink(root + "/" + rel)
            default:
                throw PatchSyncError(
                    .usage, "\(root)/\(rel) is not a regular file, folder or symbolic link",
                    remedy: "remove sockets, pipes and device files from the build folder")
            }
        }
    }

    /// Refuses exclusions that would leave players a broken build: a kept link that points at or into
    /// a path left out (it would dangle), or nothing left to publish.
    private func checkExclusions() throws(PatchSyncError) {
        let left = Set(excluded.map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 })
        for (path, target) in links.sorted(by: { $0.key < $1.key }) where !target.hasPrefix("/") {
            var parts = PathRule.components(path).dropLast().map { $0 }
            for part in PathRule.components(target) {
                if part == ".." { if parts.popLast() == nil { break } } else if part != "." { parts.append(part) }
            }
            let hit = parts.indices.map { parts[...$0].joined(separator: "/") }.first { left.contains($0) }
            if let hit {
                throw PatchSyncError(
                    .usage,
                    "\(root)/\(path) is a symbolic link to '\(target)', and --exclude leaves out \(hit): "
                        + "players would get a dangling link",
                    remedy: "exclude the link too, or keep what it points to")
            }
        }
        guard files.isEmpty && links.isEmpty && emptyFolders.isEmpty, !excluded.isEmpty else { return }
        throw PatchSyncError(
            .usage, "--exclude leaves nothing of \(root) to publish (\(excluded.count) path(s) left out)",
            remedy: "check the globs (`--dry-run` lists what each leaves out), or the build folder")
    }

    /// Records what the escaping link at `path` points to in its place: a file, or a folder walked.
    private mutating func dereference(_ path: String) throws(PatchSyncError) {
        var st = stat()
        guard stat(root + "/" + path, &st) == 0 else {
            throw PatchSyncError(
                .usage,
                "\(root)/\(path) is a symbolic link to '\((try? FileSystem.readLink(root + "/" + path)) ?? "?")', "
                    + "which does not exist, so --dereference-external cannot copy it",
                remedy: "install what it points to, or remove the link from the build")
        }
        dereferenced[path] = URL(fileURLWithPath: root + "/" + path).resolvingSymlinksInPath().path
        switch st.st_mode & S_IFMT {
        case S_IFREG: files.append(path)
        case S_IFDIR:
            guard entered.insert([UInt64(st.st_dev), UInt64(st.st_ino)]).inserted else {
                throw PatchSyncError(
                    .usage, "\(root)/\(path) leads back into a folder it was copied from (a cycle of links)",
                    remedy: "remove the link that loops, or replace it with a copy")
            }
            copied.append(path)
            try walk(path)
        default:
            throw PatchSyncError(
                .usage, "\(root)/\(path) points to something that is not a file or folder",
                remedy: "remove the link from the build")
        }
    }

    private func isCopied(_ relative: String) -> Bool {
        copied.contains { relative == $0 || relative.hasPrefix($0 + "/") }
    }

    /// The manifest's link and folder entries, each in the bundle its path matches.
    func entries(bundles: BundleRules) throws(PatchSyncError) -> (links: [LinkEntry]?, folders: [FolderEntry]?) {
        var linkEntries: [LinkEntry] = [], folderEntries: [FolderEntry] = []
        for (path, target) in links.sorted(by: { $0.key < $1.key }) {
            try Manifest.checkPath(path)
            linkEntries.append(LinkEntry(path: path, target: target, bundle: try bundles.bundle(for: path).name))
        }
        for path in emptyFolders {
            try Manifest.checkPath(path)
            folderEntries.append(FolderEntry(path: path, bundle: try bundles.bundle(for: path).name))
        }
        return (linkEntries.isEmpty ? nil : linkEntries, folderEntries.isEmpty ? nil : folderEntries)
    }
}
