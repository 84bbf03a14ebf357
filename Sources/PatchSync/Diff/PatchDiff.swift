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
        /// Bytes written into the staged tree (added and changed files; unchanged ones are hard links).
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

    /// How a sync gets a file: its chunks OLD lacks, or a delta from OLD's file (its share of the pack).
    public enum Route: String, Codable, Sendable {
        case chunks, delta
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
    /// Compares two manifests (OLD may be nil: a fresh install). `deltas` holds, per path, the file's share
    /// of the delta pack from OLD that a player on OLD fetches (``DiffSide/deltaShares(from:to:)``); a
    /// changed file with a share goes by delta, every other by chunks.
    public init(old: Manifest?, new: Manifest, oldName: String, newName: String, deltas: [String: Int64] = [:]) {
        self.old = oldName
        self.new = newName
        total = Totals()
        bundles = Dictionary(uniqueKeysWithValues: new.bundles.map { ($0.name, Totals()) })
        folders = [:]
        files = []
        removed = []
        let oldFiles = Dictionary(uniqueKeysWithValues: (old?.files ?? []).map { ($0.path, $0) })
        let have = Set((old?.files ?? []).flatMap { $0.chunks.map(\.sha256) })
        var counted = Set<SHA256Digest>()
        let rank = BundleSelection.ranks(new.bundles)
        for file in new.files.sorted(by: { (rank[$0.bundle] ?? 0, $0.path) < (rank[$1.bundle] ?? 0, $1.path) }) {
            add(file, before: oldFiles[file.path], have: have, delta: deltas[file.path], counted: &counted)
        }
        let newPaths = Set(new.files.map(\.path))
        for file in old?.files ?? [] where !newPaths.contains(file.path) {
            removed.append(file.path)
            total.filesRemoved += 1
            bundles[file.bundle, default: Totals()].filesRemoved += 1
            bundles[file.bundle, default: Totals()].diskDeltaBytes -= file.size
        }
        compareEntries(old: old, new: new)
        total.diskDeltaBytes = new.totalSize - (old?.totalSize ?? 0)
        files.sort { ($0.downloadBytes, $1.path) > ($1.downloadBytes, $0.path) }
        removed.sort()
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

    private mutating func add(
        _ file: FileEntry, before: FileEntry?, have: Set<SHA256Digest>, delta: Int64?,
        counted: inout Set<SHA256Digest>
    ) {
        var bundle = bundles[file.bundle, default: Totals()]
        defer { bundles[file.bundle] = bundle }
        bundle.diskDeltaBytes += file.size - (before?.size ?? 0)
        let patch = before == nil ? nil : delta  // a delta rebuilds a file from OLD's at the same path
        if let before, before.sha256 == file.sha256, before.mode == file.mode {
            total.filesUnchanged += 1
            bundle.filesUnchanged += 1
            return
        }
        var cost = FileCost(
            path: file.path, bundle: file.bundle, change: before == nil ? .added : .changed,
            size: file.size, reusedBytes: 0, newBytes: 0, downloadBytes: 0, route: .chunks)
        for chunk in file.chunks {
            if have.contains(chunk.sha256) {
                cost.reusedBytes += Int64(chunk.length)
                continue
            }
            cost.newBytes += Int64(chunk.length)
            if patch == nil, counted.insert(chunk.sha256).inserted { cost.downloadBytes += Int64(chunk.objectLength) }
        }
        if let patch {
            cost.route = .delta
            cost.downloadBytes = patch
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
        total.writtenBytes += file.size
        bundle.downloadBytes += cost.downloadBytes
        bundle.writtenBytes += file.size
        let folder = file.path.split(separator: "/").first.map(String.init) ?? file.path
        folders[folder, default: 0] += cost.downloadBytes
        files.append(cost)
    }
}
