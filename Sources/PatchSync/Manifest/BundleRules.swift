import Foundation

/// Assigns each file of a build to the first bundle whose globs match its path.
public struct BundleRules: Sendable {
    public let bundles: [Bundle]

    public init(bundles: [Bundle]) throws(PatchSyncError) {
        guard !bundles.isEmpty else { throw PatchSyncError(.usage, "the bundle list is empty") }
        guard Set(bundles.map(\.name)).count == bundles.count else {
            throw PatchSyncError(.usage, "bundle names must be unique")
        }
        self.bundles = bundles
    }

    /// Reads a bundles file: `{"bundles": [{"name", "required", "priority", "paths": [globs]}]}`.
    public static func load(path: String) throws(PatchSyncError) -> BundleRules {
        struct File: Decodable { var bundles: [Bundle] }
        let data = try FileSystem.read(path, limit: 1 << 20)
        do { return try BundleRules(bundles: try JSONDecoder().decode(File.self, from: data).bundles) } catch {
            throw PatchSyncError(
                .usage, "\(path) is not a bundles file",
                remedy:
                    #"write {"bundles": [{"name": "base", "required": true, "priority": 0, "paths": ["**"]}]}"#,
                cause: error)
        }
    }

    /// The bundle of `path`, or a usage error naming the file when no glob matches.
    public func bundle(for path: String) throws(PatchSyncError) -> Bundle {
        for bundle in bundles where bundle.paths.contains(where: { Glob.matches($0, path) }) { return bundle }
        throw PatchSyncError(
            .usage, "\(path) matches no bundle's paths",
            remedy: "add a catch-all bundle with the path \"**\" at the end of the bundles file")
    }
}

/// Path globs: `*` and `?` within one folder level, `**` across levels.
enum Glob {
    static func matches(_ pattern: String, _ path: String) -> Bool {
        match(Array(pattern.utf8)[...], Array(path.utf8)[...])
    }

    private static func match(_ p: ArraySlice<UInt8>, _ s: ArraySlice<UInt8>) -> Bool {
        guard let c = p.first else { return s.isEmpty }
        let slash = UInt8(ascii: "/"), star = UInt8(ascii: "*")
        if c == star, p.dropFirst().first == star {
            var rest = p.dropFirst(2)
            // `**/` stands for whole folders (none too): what follows matches at the start or after a slash.
            let folders = rest.first == slash
            if folders { rest = rest.dropFirst() }
            var t = s
            while true {
                if match(rest, t) { return true }
                guard !t.isEmpty else { return false }
                if folders {
                    guard let next = t.firstIndex(of: slash) else { return false }
                    t = t[t.index(after: next)...]
                } else {
                    t = t.dropFirst()
                }
            }
        }
        if c == star {
            var t = s
            while true {
                if match(p.dropFirst(), t) { return true }
                guard let first = t.first, first != slash else { return false }
                t = t.dropFirst()
            }
        }
        guard let first = s.first else { return false }
        if c == UInt8(ascii: "?") { return first != slash && match(p.dropFirst(), s.dropFirst()) }
        return c == first && match(p.dropFirst(), s.dropFirst())
    }
}
