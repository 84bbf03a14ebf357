import Foundation

/// Paths of a build folder that publish leaves out (debug symbols, editor files): globs as the bundles
/// file writes them (`*` and `?` within one folder level, `**` across levels). A glob without a slash
/// matches a name at any depth (`*.pdb`, `Thumbs.db`); one with a slash matches the path from the build
/// folder's top (`tools/**`, `/Saved`; a leading slash only anchors). A folder that matches is left out
/// whole, and a folder whose every entry is left out is not published.
public struct ExcludeRules: Sendable, Equatable {
    public private(set) var globs: [String]

    /// The globs given; an empty one is refused.
    public init(_ globs: [String]) throws(PatchSyncError) {
        for glob in globs where glob.trimmingCharacters(in: .whitespaces).isEmpty || glob == "/" {
            throw PatchSyncError(
                .usage, "--exclude '\(glob)' is empty: it would leave out nothing or everything",
                remedy: "give a glob such as '*.pdb' or 'tools/**'")
        }
        self.globs = globs
    }

    /// No exclusion.
    public static let none = ExcludeRules(unchecked: [])

    private init(unchecked globs: [String]) { self.globs = globs }

    /// The globs of a file: one a line; blank lines and lines starting with `#` are skipped.
    public static func globs(inFile path: String) throws(PatchSyncError) -> [String] {
        let data: Data
        do { data = try FileSystem.read(path, limit: 1 << 20) } catch {
            throw PatchSyncError.wrap(error).during("reading the exclude file \(path)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw PatchSyncError(
                .usage, "the exclude file \(path) is not UTF-8 text", remedy: "write one glob a line, in UTF-8")
        }
        return text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }

    public var isEmpty: Bool { globs.isEmpty }

    /// Whether `path` (relative to the build folder, a file's or a folder's) is left out.
    public func excludes(_ path: String) -> Bool {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return globs.contains { glob in
            glob.contains("/")
                ? Glob.matches(glob.hasPrefix("/") ? String(glob.dropFirst()) : glob, path)
                : Glob.matches(glob, name)
        }
    }
}
