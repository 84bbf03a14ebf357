import Foundation

/// Resolves symbolic links of a build the way the kernel would, within the build's own tree: a
/// link stays inside when following it, and every link it passes through, never climbs above the
/// build's root (nor takes more than 40 hops, nor walks more than 256 path components). Paths are
/// split on the byte `/` and compared exactly, as the kernel compares them; a manifest in which a
/// link and a folder differ only in case is refused by its validation, so a case-insensitive disk
/// resolves the same way. Publish refuses (or copies) a link that escapes; a client refuses a
/// manifest with one.
struct LinkResolver: Sendable {
    private let targets: [String: String]

    init(links: [LinkEntry]) {
        targets = Dictionary(links.map { ($0.path, $0.target) }, uniquingKeysWith: { a, _ in a })
    }

    init(targets: [String: String]) {
        self.targets = Dictionary(targets.map { ($0.key, $0.value) }, uniquingKeysWith: { a, _ in a })
    }

    /// A target a manifest may hold: relative, non-empty, no NUL, at most 4096 bytes.
    static func isUsableTarget(_ target: String) -> Bool {
        !target.isEmpty && !target.hasPrefix("/") && target.utf8.count <= 4096 && !target.utf8.contains(0)
    }

    /// Whether the link at `path` resolves to a place inside the tree (which need not exist).
    func staysInside(_ path: String) -> Bool {
        guard let target = targets[path], Self.isUsableTarget(target) else { return false }
        var stack = PathRule.components(path).dropLast().map { $0 }
        var pending = Array(PathRule.components(target).reversed())
        var hops = 1, walked = 0
        while let component = pending.popLast() {
            walked += 1
            guard walked <= 256 else { return false }
            switch component {
            case ".": continue
            case "..":
                guard !stack.isEmpty else { return false }
                stack.removeLast()
            default:
                stack.append(component)
                guard let next = targets[stack.joined(separator: "/")] else { continue }
                hops += 1
                guard hops <= 40, Self.isUsableTarget(next) else { return false }
                stack.removeLast()
                pending += PathRule.components(next).reversed()
            }
        }
        return true
    }
}
