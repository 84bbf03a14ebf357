import Foundation

/// What a patch from one build to another costs players, per bundle and per file.
public struct PatchDiff: Codable, Sendable {
    /// Totals for a bundle, or for the whole patch.
    public struct Totals: Codable, Sendable, Equatable {
        public var filesAdded = 0
        public var filesRemoved = 0
        public var filesChanged = 0
        public var filesUnchanged = 0
        /// Changed files that a delta pack from OLD rebuilds (``Route/delta``).
        public var filesPatched = 0
        /// What a player on OLD downloads: the compressed chunks NEW needs that OLD lacks, each distinct
        /// chunk once, and for the files a delta pack rebuilds their shares of the pack instead. Metadata
        /// (the signed roles and the manifest) is in ``PatchDiff/metadataBytes``, not here.
        public var downloadBytes: Int64 = 0
        /// Bytes written into the staged tree (added and changed files; unchanged ones, and files whose
        /// bytes the player holds at another path, are hard links).
        public var writtenBytes: Int64 = 0
        /// Size of the new build minus size of the old one.
        public var diskDeltaBytes: Int64 = 0
    }

    /// One added or changed file.
    public struct FileCost: Codable, Sendable, Equatable {
        public var path: String
        public var bundle: String
        public var change: Change
        public var size: Int64
        /// Bytes of the file made of chunks OLD already has.
        public var reusedBytes: Int64
        /// Bytes of the file in chunks OLD lacks (uncompressed).
        public var newBytes: Int64
        public var downloadBytes: Int64
        /// How a player on OLD gets the file.
        public var route: Route
    }

    /// How a sync gets a file: its chunks (those the player lacks fetched, the others copied), a delta
    /// from OLD's file (its share of the pack), or a hard link to the same bytes the player already holds
    /// at another path (a renamed or copied file: nothing fetched or written).
    public enum Route: String, Codable, Sendable {
        case chunks, delta, link
    }

    public enum Change: String, Codable, Sendable {
        case added, changed
    }

    public var old: String
    public var new: String
    /// What a player fetches before any content, predicted when NEW is a build folder: the manifest (or
    /// its delta from OLD's) and, for an origin's build, the signed metadata. Not in `total.downloadBytes`,
    /// which is the content (the sum of the files'); `allDownloadBytes` is both.
    public var metadataBytes: Int64?
    public var total: Totals
    public var bundles: [String: Totals]
    /// Download bytes per top-level folder.
    public var folders: [String: Int64]
    /// Added and changed files, largest download first.
    public var files: [FileCost]
    public var removed: [String]
    /// The bundles costed, when a selection was given (`--bundle`, `--required-only`); absent: every bundle.
    public var selection: [String]?
    /// Symbolic links and empty folders added or changed (`path -> target`, `path/`); removed ones are in `removed`.
    public var entries: [String] = []
    /// The verdict on the budgets given (`diff --budget`): absent when none was.
    public var budget: BudgetVerdict?

    /// Whether the patch fits its budgets: each limit, what the patch downloads against it, and a sentence.
    public struct BudgetVerdict: Codable, Sendable, Equatable {
        public struct Limit: Codable, Sendable, Equatable {
            /// "total", or a bundle's name.
            public var name: String
            public var limit: Int64
            public var bytes: Int64
            public var within: Bool
            public init(name: String, limit: Int64, bytes: Int64, within: Bool) {
                self.name = name
                self.limit = limit
                self.bytes = bytes
                self.within = within
            }
        }
        public var within: Bool
        public var limits: [Limit]
        public var verdict: String

        public init(limits: [Limit]) {
            self.limits = limits
            within = limits.allSatisfy(\.within)
            verdict =
                (within ? "within budget: " : "over budget: ")
                + limits.map { limit in
                    "\(limit.name) \(ByteCount.format(limit.bytes)) of \(ByteCount.format(limit.limit))"
                        + (limit.within ? "" : " (over by \(ByteCount.format(limit.bytes - limit.limit)))")
                }.joined(separator: ", ")
        }
    }

    /// Everything a player downloads: the content and, when predicted, the manifest and metadata.
    public var allDownloadBytes: Int64 { total.downloadBytes + (metadataBytes ?? 0) }

    /// The largest contributors to the download.
    public var largest: [FileCost] { Array(files.prefix(10)) }
}

extension PatchDiff {
    /// Compares two manifests (OLD may be nil: a fresh install), as a player holding exactly OLD's files
    /// sees the patch. `deltas` holds, per path, the file's share of the delta pack from OLD that a player
    /// on OLD fetches (``DiffSide/deltaShares(from:to:)``); empty: no pack.
    public init(old: Manifest?, new: Manifest, oldName: String, newName: String, deltas: [String: Int64] = [:]) {
        self.init(
            old: old, new: new, oldName: oldName, newName: newName, deltas: deltas,
            local: LiveTree(holding: old.map { [$0] } ?? []))
    }

    /// Compares two builds as a sync on a machine holding `local` plans the patch (``UpdatePlan``, the
    /// sync's own planner): files it holds anywhere are linked, chunks it holds in any file are copied,
    /// a changed file the delta pack covers is rebuilt from it, and every other chunk is fetched once.
    init(old: Manifest?, new: Manifest, oldName: String, newName: String, deltas: [String: Int64], local: LiveTree) {
        self.old = oldName
        self.new = newName
        total = Totals()
        bundles = Dictionary(uniqueKeysWithValues: new.bundles.map { ($0.name, Totals()) })
        folders = [:]
        files = []
        removed = []
        // The pack: the one NEW's origin has from OLD (its shares add up to its length), or the one a
        // publish would write; only the files with a share are in it.
        var target = new
        target.deltas = nil
        let pack = old.flatMap { Self.pack(from: $0, to: new, shares: deltas) }
        var held = local
        if let old { held.manifest = old }  // the source of OLD's delta packs
        let update = UpdatePlan(manifest: target, local: held, pack: pack)
        let linked = Set(update.plan.links.map(\.path)), rebuilt = update.delta?.paths ?? []
        let rank = BundleSelection.ranks(new.bundles)
        let order = new.files.sorted(by: { (rank[$0.bundle] ?? 0, $0.path) < (rank[$1.bundle] ?? 0, $1.path) })
        // Each chunk the sync fetches counts once, for the first file (in bundle order) that is not rebuilt by the pack.
        let position = Dictionary(order.enumerated().map { ($1.path, $0) }, uniquingKeysWith: { a, _ in a })
        var fetched: [String: Int64] = [:]
        for need in update.plan.fetch {
            let takers = need.destinations.map(\.path).filter { !rebuilt.contains($0) }
            guard let first = takers.min(by: { (position[$0] ?? 0) < (position[$1] ?? 0) }) else { continue }
            fetched[first, default: 0] += Int64(need.chunk.objectLength)
        }
        let oldFiles = Dictionary((old?.files ?? []).map { ($0.path, $0) }, uniquingKeysWith: { a, _ in a })
        for file in order {
            add(
                file, before: oldFiles[file.path], linked: linked.contains(file.path), held: held,
                download: rebuilt.contains(file.path) ? deltas[file.path] : fetched[file.path] ?? 0,
                delta: rebuilt.contains(file.path))
        }
        let newPaths = Set(new.files.map(\.path))
        for file in old?.files ?? [] where !newPaths.contains(file.path) {
            removed.append(file.path)
            total.filesRemoved += 1
            bundles[file.bundle, default: Totals()].filesRemoved += 1
            bundles[file.bundle, default: Totals()].diskDeltaBytes -= file.size
        }
        // The shares of files the pack does not rebuild here (another bundle's, or held already): fetched
        // with the pack all the same, in the total (no file's or bundle's).
        if let route = update.delta {
            total.downloadBytes += route.pack.length - route.paths.reduce(Int64(0)) { $0 + (deltas[$1] ?? 0) }
        }
        compareEntries(old: old, new: new)
        total.diskDeltaBytes = new.totalSize - (old?.totalSize ?? 0)
        files.sort { ($0.downloadBytes, $1.path) > ($1.downloadBytes, $0.path) }
        removed.sort()
    }
    /// The pack a sync would fetch from OLD, as its shares say (nil without any): every file with a share
    /// is in it, and a new path's delta starts from the old file publish chose for it (same name, elsewhere).
    private static func pack(from old: Manifest, to new: Manifest, shares deltas: [String: Int64]) -> DeltaSource? {
        guard !deltas.isEmpty else { return nil }
        // A sync fetches the pack whole: every file's share, those of files not costed here too.
        let covers = new.files.indices.filter { deltas[new.files[$0].path] != nil }
        let length = deltas.values.reduce(Int64(0), +)
        var moved = new.deltas?.first { $0.from == old.buildId }?.moved ?? [:]  // the published pack's
        if new.deltas == nil {  // else the pack a publish would write, its sources chosen as publish does
            let sources = DeltaSourceIndex(old)
            for index in covers {
                let file = new.files[index]
                if let source = sources.source(for: file), source.path != file.path { moved[file.path] = source.path }
            }
        }
        return DeltaSource(
            from: old.buildId, object: SHA256Hasher.hash(Data()), length: length, files: deltas.count,
            covers: covers, moved: moved.isEmpty ? nil : moved)
    }

    /// Links and empty folders: a link whose target changed, or a new one, and a new empty folder.
    private mutating func compareEntries(old: Manifest?, new: Manifest) {
        let before = Dictionary((old?.links ?? []).map { ($0.path, $0.target) }, uniquingKeysWith: { a, _ in a })
        let after = Dictionary(new.links?.map { ($0.path, $0.target) } ?? [], uniquingKeysWith: { a, _ in a })
        let oldFolders = Set((old?.folders ?? []).map(\.path)), newFolders = Set((new.folders ?? []).map(\.path))
        entries =
            after.filter { before[$0.key] != $0.value }.map { "\($0.key) -> \($0.value)" }
            + newFolders.subtracting(oldFolders).map { $0 + "/" }
        entries.sort()
        removed += before.keys.filter { after[$0] == nil } + oldFolders.subtracting(newFolders).map { $0 + "/" }
    }

    /// Counts one file of NEW: unchanged (OLD's file at its path, linked), linked from a file held
    /// elsewhere, rebuilt by the delta pack (`download`: its share), or assembled from chunks (`download`:
    /// the fetched chunks counted for it).
    private mutating func add(
        _ file: FileEntry, before: FileEntry?, linked: Bool, held: LiveTree, download: Int64?, delta: Bool
    ) {
        var bundle = bundles[file.bundle, default: Totals()]
        defer { bundles[file.bundle] = bundle }
        bundle.diskDeltaBytes += file.size - (before?.size ?? 0)
        if linked, let before, before.sha256 == file.sha256, before.mode == file.mode {
            total.filesUnchanged += 1
            bundle.filesUnchanged += 1
            return
        }
        var cost = FileCost(
            path: file.path, bundle: file.bundle, change: before == nil ? .added : .changed,
            size: file.size, reusedBytes: 0, newBytes: 0, downloadBytes: download ?? 0,
            route: linked ? .link : delta ? .delta : .chunks)
        if linked {
            cost.reusedBytes = file.size
        } else {
            for chunk in file.chunks {
                if held.chunks[chunk.sha256] != nil {
                    cost.reusedBytes += Int64(chunk.length)
                } else {
                    cost.newBytes += Int64(chunk.length)
                }
            }
            total.writtenBytes += file.size
            bundle.writtenBytes += file.size
        }
        if delta {
            total.filesPatched += 1
            bundle.filesPatched += 1
        }
        if before == nil {
            total.filesAdded += 1
            bundle.filesAdded += 1
        } else {
            total.filesChanged += 1
            bundle.filesChanged += 1
        }
        total.downloadBytes += cost.downloadBytes
        bundle.downloadBytes += cost.downloadBytes
        let folder = file.path.split(separator: "/").first.map(String.init) ?? file.path
        folders[folder, default: 0] += cost.downloadBytes
        files.append(cost)
    }
}
