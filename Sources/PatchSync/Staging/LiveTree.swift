import Foundation

/// The verified content of the live build: which file contents and chunks it
/// holds, checked through the stat cache (size, mtime, inode) and re-hashed where
/// the cache disagrees.
struct LiveTree: Sendable {
    /// Content and installed mode → a live file a staged file may share its inode with (two files
    /// with the same bytes and different modes never share one), or read from (deltas' sources).
    var linkable: [Plan.Content: String] = [:]
    /// Chunk hash → where it sits in a verified live file.
    var chunks: [SHA256Digest: Plan.LocalChunk] = [:]
    /// The live build's manifest (nil when there is no live build).
    var manifest: Manifest?
    /// The stat (size, time, inode) each linkable file was verified with, by its path: a staged file
    /// linked from it is that inode, and takes that record (no stat of its own), so a later fast verify
    /// compares it with what was verified, not with whatever the inode held when it was linked.
    var records: [String: StateStore.FileStat] = [:]

    /// No live build: nothing local to reuse.
    init() {}

    /// What an update can take from the live files: when it changes a few files of a build whose other
    /// files are already in place, only live files that have one of `contents`, sit at one of `paths`
    /// (a changed file's delta source) or hold one of `chunks` are worth a look.
    struct Interest: Sendable {
        var contents = Set<Plan.Content>()
        var paths = Set<String>()
        var chunks = Set<SHA256Digest>()

        /// What staging `pending`, files of `manifest`, needs.
        init(_ manifest: Manifest, pending: [FileEntry]) {
            for file in pending {
                contents.insert(Plan.Content(file))
                paths.insert(file.path)
                for chunk in file.chunks { chunks.insert(chunk.sha256) }
            }
            for pack in manifest.deltas ?? [] { paths.formUnion((pack.moved ?? [:]).values) }
        }

        func wants(_ file: FileEntry) -> Bool {
            contents.contains(Plan.Content(file)) || paths.contains(file.path)
                || file.chunks.contains { chunks.contains($0.sha256) }
        }
    }

    /// Checks every file of `manifest` under `directory` (with `interest`, only those it wants); files
    /// that changed are left out.
    init(
        manifest: Manifest, directory: String, build: String, state: StateStore, interest: Interest? = nil
    ) throws(PatchSyncError) {
        self.manifest = manifest
        // With `interest`, only the records of the files it wants are read.
        let files = interest.map { interest in manifest.files.filter(interest.wants) } ?? manifest.files
        let cache =
            try interest == nil
            ? state.statCache(build: build) : state.statCache(build: build, paths: files.map(\.path))
        var updated: [String: StateStore.FileStat] = [:]
        // Sized once: growing two tables of a million entries rehashes each of them twenty times.
        if interest == nil {
            linkable.reserveCapacity(manifest.files.count)
            chunks.reserveCapacity(manifest.files.reduce(0) { $0 + $1.chunks.count })
        }
        for file in files {
            let full = directory + "/" + file.path
            guard let st = try? FileSystem.status(full), (st.st_mode & S_IFMT) == S_IFREG,
                Int64(st.st_size) == file.size, UInt32(st.st_mode) & 0o777 == Plan.installedMode(file.mode)
            else { continue }
            let now = StateStore.FileStat(st)
            if cache[file.path] != now {
                guard (try? SHA256Hasher.hash(file: full)) == file.sha256 else { continue }
                updated[file.path] = now
            }
            add(file, at: full, recorded: now)
        }
        if !updated.isEmpty { try state.saveStatCache(build: build, updated) }
    }

    private mutating func add(_ file: FileEntry, at full: String, recorded: StateStore.FileStat) {
        linkable[Plan.Content(file)] = full
        records[full] = recorded
        for chunk in file.chunks where chunks[chunk.sha256] == nil {
            chunks[chunk.sha256] = Plan.LocalChunk(path: full, offset: chunk.offset)
        }
    }
}

extension LiveTree {
    /// Adds what `other` has that this tree lacks.
    mutating func merge(_ other: LiveTree) {
        if linkable.isEmpty && chunks.isEmpty {  // nothing here yet: take it whole
            let manifest = manifest
            self = other
            self.manifest = manifest  // as a merge leaves it
            return
        }
        linkable.merge(other.linkable) { mine, _ in mine }
        chunks.merge(other.chunks) { mine, _ in mine }
        records.merge(other.records) { mine, _ in mine }
    }

    /// Whether every one of `files` is here whole (same bytes and mode): a bundle made of them costs nothing.
    func holdsWhole(_ files: [FileEntry]) -> Bool {
        files.allSatisfy { linkable[Plan.Content($0)] != nil }
    }
}

extension Plan {
    /// Installed files are read-only: the manifest's permission bits without write bits.
    static func installedMode(_ mode: UInt32) -> UInt32 { mode & 0o555 }
}

extension LiveTree {
    /// The live files for a repair: every file but the damaged ones may be linked, and the
    /// chunks of all present files may be copied (each chunk is re-verified as it is copied).
    init(manifest: Manifest, directory: String, excluding damaged: Set<String>) {
        self.manifest = manifest
        for file in manifest.files {
            let full = directory + "/" + file.path
            guard FileSystem.exists(full) else { continue }
            if !damaged.contains(file.path) { linkable[Plan.Content(file)] = full }
            for chunk in file.chunks where chunks[chunk.sha256] == nil {
                chunks[chunk.sha256] = Plan.LocalChunk(path: full, offset: chunk.offset)
            }
        }
    }
}
