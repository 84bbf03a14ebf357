import Foundation

/// Which file of a source build a delta of a target file starts from: the file at the same path, or for
/// a new path the file of the same name elsewhere in the source build closest in size (a track or a
/// texture that moved, a copy that was edited). Publish picks sources by it, and `diff` predicts the
/// same choice.
struct DeltaSourceIndex {
    private let byPath: [String: FileEntry]
    private let byName: [Substring: [FileEntry]]

    init(_ source: Manifest) {
        byPath = Dictionary(source.files.map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        var named: [Substring: [FileEntry]] = [:]
        for file in source.files { named[Self.name(file.path), default: []].append(file) }
        byName = named
    }

    /// The source build's file a delta to `file` starts from, if any: at its path, or (`acrossFiles`) of its
    /// name and bundle (a player who has the file's bundle has that one too) and the closest in size.
    func source(for file: FileEntry, acrossFiles: Bool = true) -> FileEntry? {
        if let same = byPath[file.path] { return same }
        guard acrossFiles else { return nil }
        return byName[Self.name(file.path)]?.lazy.filter { $0.bundle == file.bundle }
            .min { (abs($0.size - file.size), $0.path) < (abs($1.size - file.size), $1.path) }
    }

    /// A path's last component.
    static func name(_ path: String) -> Substring { path.split(separator: "/").last ?? Substring(path) }
}
