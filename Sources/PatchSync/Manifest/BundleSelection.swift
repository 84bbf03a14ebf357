import Foundation

/// Which bundles of a build an install holds: every required one, and the optional ones its player
/// chose (all of them when the install never chose). Optional bundles come in a fixed order: by
/// priority, then as the publisher's bundles file lists them.
public struct BundleSelection: Sendable, Equatable {
    /// The bundles wanted, in download order: required ones first.
    public var wanted: [String]
    /// Bundles the player chose that this build does not have (reported, not an error).
    public var dropped: [String]
    /// The optional bundles wanted, in download order.
    public var optional: [String]

    /// The selection `chosen` (nil: every optional bundle but `excluded`) makes of `manifest`.
    public init(_ manifest: Manifest, chosen: [String]?, excluded: [String] = []) {
        self.init(bundles: manifest.bundles, chosen: chosen, excluded: excluded)
    }

    /// The selection `chosen` makes of a build with `bundles` (its manifest's, or a ``BuildSummary``'s).
    init(bundles: [Bundle], chosen: [String]?, excluded: [String] = []) {
        let names = Set(bundles.map(\.name))
        let picked = Set(chosen ?? bundles.map(\.name)).subtracting(chosen == nil ? excluded : [])
        let ordered = Self.downloadOrder(bundles)
        wanted = ordered.filter { $0.required || picked.contains($0.name) }.map(\.name)
        optional = ordered.filter { !$0.required && picked.contains($0.name) }.map(\.name)
        dropped = (chosen ?? []).filter { !names.contains($0) }.sorted()
    }

    /// Required bundles first (by priority), then optional ones by priority, ties in the file's order.
    static func downloadOrder(_ bundles: [Bundle]) -> [Bundle] {
        bundles.enumerated().sorted {
            ($0.element.required ? 0 : 1, $0.element.priority, $0.offset) < (
                $1.element.required ? 0 : 1, $1.element.priority, $1.offset
            )
        }.map(\.element)
    }

    /// Each bundle's place in the download order (lower first).
    static func ranks(_ bundles: [Bundle]) -> [String: Int] {
        Dictionary(uniqueKeysWithValues: downloadOrder(bundles).enumerated().map { ($0.element.name, $0.offset) })
    }

    /// The deployments a sync stages one after another, each the one before plus one more optional
    /// bundle, so that the build is playable once its required part is staged and each optional bundle
    /// goes live whole: the first holds the required bundles and the optional ones `local` says are
    /// already complete on disk; the last holds every wanted bundle.
    func steps(completeLocally local: (String) -> Bool) -> [[String]] {
        let required = wanted.filter { !optional.contains($0) }
        var current = Set(required + optional.filter(local))
        // a build without required bundles starts with its first optional one
        var steps = current.isEmpty ? [] : [canonical(current)]
        for name in optional where !current.contains(name) {
            current.insert(name)
            steps.append(canonical(current))
        }
        return steps.isEmpty ? [[]] : steps
    }

    /// A set of bundles as a deployment records it: in the download order.
    func canonical(_ names: Set<String>) -> [String] { wanted.filter(names.contains) }
}

extension Manifest {
    /// The build as a deployment holding only `bundles` has it: their files, links and folders.
    public func selecting(_ bundles: [String]) -> Manifest {
        let keep = Set(bundles)
        guard !self.bundles.allSatisfy({ keep.contains($0.name) }) else { return self }
        var selected = self
        selected.files = files.filter { keep.contains($0.bundle) }
        // A delta pack names files by their index in the full list: the narrowed list says where each went.
        var position: [Int: Int] = [:]
        for (index, file) in files.enumerated() where keep.contains(file.bundle) { position[index] = position.count }
        selected.deltas = deltas?.map { pack in
            var pack = pack
            pack.narrowed = pack.narrowed.map { $0.compactMapValues { position[$0] } } ?? position
            pack.covers = pack.covers?.compactMap { position[$0] }
            return pack
        }
        selected.links = links?.filter { keep.contains($0.bundle) }
        selected.folders = folders?.filter { keep.contains($0.bundle) }
        return selected
    }

    /// Per bundle: its files' total size.
    public var bundleSizes: [String: Int64] {
        var sizes = Dictionary(uniqueKeysWithValues: bundles.map { ($0.name, Int64(0)) })
        for file in files { sizes[file.bundle, default: 0] += file.size }
        return sizes
    }
}
