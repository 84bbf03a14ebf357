import Foundation

/// Paths of a build folder that publish leaves out (debug symbols, editor files): globs as the bundles
/// file writes them (`*` and `?` within one folder level, `**` across levels; other characters, `[`
/// too, stand for themselves). A glob without a slash matches a name at any depth (`*.pdb`,
/// `Thumbs.db`); one with a slash matches the path from the build folder's top (`tools/**`, `/Saved`; a
/// leading slash or `./` only anchors); a trailing slash matches folders only (`Intermediate/`). A folder
/// that matches is left out whole, and a folder whose every entry is left out is not published.
public struct ExcludeRules: Sendable, Equatable {
    /// One glob as given, and how it matches.
    struct Rule: Sendable, Equatable {
        var given: String
        var pattern: String
        var anchored: Bool
        var foldersOnly: Bool
    }

    private(set) var rules: [Rule]

    /// The globs as given.
    public var globs: [String] { rules.map(\.given) }

    /// The globs given; one that is empty or matches every path is refused.
    public init(_ globs: [String]) throws(PatchSyncError) {
        rules = try globs.map { (given) throws(PatchSyncError) in try Self.rule(given) }
    }

    /// No exclusion.
    public static let none = ExcludeRules(rules: [])

    private init(rules: [Rule]) { self.rules = rules }

    private static func rule(_ given: String) throws(PatchSyncError) -> Rule {
        var glob = given.trimmingCharacters(in: .whitespaces.union(CharacterSet(charactersIn: "\u{FEFF}")))
        var anchored = false
        while glob.hasPrefix("./") || glob.hasPrefix("/") {
            glob.removeFirst(glob.hasPrefix("/") ? 1 : 2)
            anchored = true
        }
        let foldersOnly = glob.hasSuffix("/")
        while glob.hasSuffix("/") { glob.removeLast() }
        anchored = anchored || glob.contains("/")
        guard !glob.isEmpty else {
            throw PatchSyncError(
                .usage, "--exclude '\(given)' is empty: it would leave out nothing or everything",
                remedy: "give a glob such as '*.pdb' or 'tools/**'")
        }
        guard glob.contains(where: { $0 != "*" && $0 != "/" }) else {
            throw PatchSyncError(
                .usage, "--exclude '\(given)' matches every path: nothing of the build would be published",
                remedy: "name what to leave out, such as '*.pdb' or 'tools/**'")
        }
        return Rule(given: given, pattern: glob, anchored: anchored, foldersOnly: foldersOnly)
    }

    /// The globs of a file: one a line; blank lines and lines starting with `#` are skipped (a byte-order
    /// mark is ignored).
    public static func globs(inFile path: String) throws(PatchSyncError) -> [String] {
        let data: Data
        do { data = try FileSystem.read(path, limit: 1 << 20) } catch {
            throw PatchSyncError.wrap(error).during("reading the exclude file \(path)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw PatchSyncError(
                .usage, "the exclude file \(path) is not UTF-8 text", remedy: "write one glob a line, in UTF-8")
        }
        return text.split(whereSeparator: \.isNewline)
            .map { $0.trimmingCharacters(in: .whitespaces.union(CharacterSet(charactersIn: "\u{FEFF}"))) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }

    public var isEmpty: Bool { rules.isEmpty }

    /// The glob (as given) that leaves out `path` (relative to the build folder; `isFolder`: a folder's),
    /// or nil when it is kept.
    public func match(_ path: String, isFolder: Bool) -> String? {
        guard !rules.isEmpty else { return nil }  // the scan asks for every entry of the build
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return rules.first { rule in
            (!rule.foldersOnly || isFolder) && Glob.matches(rule.pattern, rule.anchored ? path : name)
        }?.given
    }

    /// Whether `path` is left out.
    public func excludes(_ path: String, isFolder: Bool = false) -> Bool { match(path, isFolder: isFolder) != nil }
}
