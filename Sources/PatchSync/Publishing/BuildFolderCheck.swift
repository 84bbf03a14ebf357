import Foundation

/// Every problem of a build folder, found in one pass over its names and modes before anything is
/// chunked or written: what players' clients would refuse (the one path rule, names that differ only in
/// case, a file where a folder is), files a player could not read, and names that Windows or macOS
/// cannot hold (reserved names such as `CON`, `:` and other characters, a trailing dot or space), which
/// are warnings unless `portable` makes them refusals. What `--dereference-external` copies in from
/// outside the build is listed as a warning.
public struct BuildFolderCheck: Sendable {
    /// One problem, with the path it concerns.
    public struct Problem: Sendable, Equatable, CustomStringConvertible {
        public var path: String
        public var reason: String
        public var description: String { "\(path): \(reason)" }
    }

    public var refusals: [Problem] = []
    public var warnings: [Problem] = []

    /// Checks `folder` (its files, links and empty folders as scanned).
    public static func of(_ folder: BuildFolder, portable: Bool = false) -> BuildFolderCheck {
        var check = BuildFolderCheck()
        let leaves = folder.files + folder.links.keys.sorted() + folder.emptyFolders
        var folders = Set<String>()
        for path in leaves { folders.formUnion(PathRule.ancestors(path)) }
        // Names clients refuse, and names other systems cannot hold (each folder once).
        for path in leaves + folders.sorted() {
            if let problem = PathRule.problem(path) {
                check.refusals.append(Problem(path: path, reason: "players' clients refuse it: it \(problem)"))
                continue
            }
            if let unportable = unportable(PathRule.split(path).name) {
                let problem = Problem(path: path, reason: "Windows or macOS cannot hold this name: \(unportable)")
                if portable { check.refusals.append(problem) } else { check.warnings.append(problem) }
            }
        }
        // One entry per name on a case-insensitive disk, and never a file where a folder is.
        var byFolded: [String: [String]] = [:]
        for path in Set(leaves).union(folders) { byFolded[PathRule.folded(path), default: []].append(path) }
        for (_, paths) in byFolded where paths.count > 1 {
            let sorted = paths.sorted()
            check.refusals.append(
                Problem(
                    path: sorted[0],
                    reason:
                        "differs only in case from \(sorted.dropFirst().joined(separator: ", ")) (one file on a case-insensitive disk)"
                ))
        }
        // A mode that leaves the owner unable to read the file installs unreadable.
        for path in folder.files {
            var st = stat()
            guard lstat(folder.root + "/" + path, &st) == 0 else {
                check.refusals.append(
                    Problem(path: path, reason: "cannot be read: \(String(cString: strerror(errno)))"))
                continue
            }
            if st.st_mode & 0o400 == 0 {
                check.refusals.append(
                    Problem(
                        path: path,
                        reason: "has mode \(String(st.st_mode & 0o777, radix: 8)): players could not read it"))
            } else if access(folder.root + "/" + path, R_OK) != 0 {
                check.refusals.append(
                    Problem(path: path, reason: "cannot be read: \(String(cString: strerror(errno)))"))
            }
        }
        // What --dereference-external copies from outside the build is listed, so nothing comes in unseen.
        for (path, source) in folder.dereferenced {
            check.warnings.append(
                Problem(path: path, reason: "copied from \(source) outside the build (--dereference-external)"))
        }
        check.refusals.sort { $0.path < $1.path }
        check.warnings.sort { $0.path < $1.path }
        return check
    }

    /// Names Windows reserves, whatever their extension.
    static let reservedNames: Set<String> = Set(
        ["CON", "PRN", "AUX", "NUL"] + (1...9).flatMap { ["COM\($0)", "LPT\($0)"] })

    /// Why Windows or macOS could not hold `name`, or nil.
    static func unportable(_ name: String) -> String? {
        let stem =
            name.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? name
        if reservedNames.contains(stem.uppercased()) { return "\(stem) is a reserved name on Windows" }
        if let bad = name.unicodeScalars.first(where: { "<>:\"|?*".unicodeScalars.contains($0) || $0.value < 0x20 }) {
            return bad.value < 0x20 ? "it holds a control character" : "it holds '\(bad)'"
        }
        if name.hasSuffix(".") || name.hasSuffix(" ") { return "it ends with a dot or a space" }
        return nil
    }

    /// The refusal of a build folder with every refused path, or nil when there is none.
    public func error(folder: String) -> PatchSyncError? {
        guard !refusals.isEmpty else { return nil }
        return PatchSyncError(
            .usage,
            "\(folder) cannot be published: \(refusals.count) problem\(refusals.count == 1 ? "" : "s"):\n  "
                + refusals.map(\.description).joined(separator: "\n  "),
            remedy: "rename, remove or fix the mode of those paths in the build folder, then publish again; "
                + "nothing was written")
    }
}
