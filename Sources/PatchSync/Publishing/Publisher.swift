import Foundation
import Synchronization

/// Turns a build folder into objects, a manifest and new signed metadata in an origin.
public struct Publisher: Sendable {
    public struct Options: Sendable {
        public var buildDirectory: String
        public var origin: String
        public var buildId: BuildID
        public var channel: Channel = .live
        public var bundles: BundleRules
        public var chunking: ChunkingParameters = .standard
        /// How new objects, packs and delta packs are compressed: zstd (the default) or deflate.
        public var codec: ObjectCodec = .default
        /// How many of the channel's latest builds get a delta pack to this one (0: none).
        public var deltaSources = 2
        /// Files up to this size are stored in pack objects of about `packSize` bytes (0: no packs).
        public var smallFileBytes = PackWriter.defaultSmallFile
        public var packSize = PackWriter.defaultTargetSize
        /// Copy what a link that escapes the build folder points to, rather than refuse the build.
        public var dereferenceExternal = false
        /// Names Windows or macOS cannot hold are refused, not only warned about.
        public var portable = false
        /// How many builds of each channel targets.json keeps listed (the newest by sequence); older
        /// ones can no longer be installed, and targets.json stays bounded however long the
        /// repository runs. Their objects stay in the origin.
        public var keepBuilds = Options.defaultKeepBuilds
        /// About 1 KiB of targets.json per build: 64 builds of each of a few channels stay far under a
        /// client's cap on unpinned metadata (5 MB), and many months of releases.
        public static let defaultKeepBuilds = 64
        public var now = Date()
        /// Set for a preload build: new content is sealed until the release (``Preload``).
        public var preload: Preload?
        /// Publish a build that removes most of the channel's current build (more than half its files or
        /// bytes); without it such a build is refused as the wrong folder.
        public var replaceMost = false
        /// Check the folder and cost the patch from the channel's current build; write nothing.
        public var dryRun = false
        /// The publisher's content-key folder, for pending preloads listed again above this build.
        public var contentKeys: String?
        /// List the build on a channel the repository has never had although its name is close to one
        /// it has (``NewChannelCheck``); without it such a name is refused as a typo.
        public var newChannel = false
        /// Paths of the build folder left out of the build (``ExcludeRules``).
        public var exclude = ExcludeRules.none
        /// What the build is, in the publisher's words; signed with its target and shown by `repo status`.
        public var description: String?
        /// Who publishes it (a name the publisher gives; nil: this machine's host name).
        public var publisherName: String?
        /// How scattered a changed file's chunks may be before it is stored whole again (``Fragmentation``).
        public var fragmentation = Fragmentation.standard

        public init(buildDirectory: String, origin: String, buildId: BuildID, bundles: BundleRules) {
            self.buildDirectory = buildDirectory
            self.origin = origin
            self.buildId = buildId
            self.bundles = bundles
        }
    }

    /// A preload build: when it is released, and the folder its content key goes to (`<folder>/<channel>/<build>.key`).
    public struct Preload: Sendable {
        public var releaseAt: Date
        public var contentKeys: String
        public init(releaseAt: Date, contentKeys: String) {
            self.releaseAt = releaseAt
            self.contentKeys = contentKeys
        }
    }

    /// What a publish did.
    public struct Report: Sendable, Codable {
        public var buildId: String
        public var channel: String
        public var sequence: Int
        public var files: Int
        public var totalBytes: Int64
        public var objectsWritten: Int
        public var objectBytesWritten: Int64
        /// True when this exact build was already published: nothing was written.
        public var alreadyPublished: Bool
        public var manifestTarget: String
        /// The delta packs written, one per recent build.
        public var deltas: [DeltaReport] = []
        /// Roles of the repository that expire soon, with the command that renews each.
        public var warnings: [String] = []
        /// For a preload build: when it is released, where its content key is, and what a preload costs.
        public var preload: PreloadReport?
        /// Set by a dry run: nothing was written.
        public var dryRun = false
        /// For a dry run: what players of the channel's current build would download (chunks only;
        /// deltas, which publish adds, can only lower it).
        public var patch: PatchDiff?
        /// The channel's pending preloads listed again above this build (their content unchanged).
        public var relistedPreloads: [String] = []
        /// The paths of the build folder `--exclude` left out (a folder's with a trailing slash).
        public var excluded: [String] = []
        /// Chunks of changed files left where earlier builds stored them (not written again), and their
        /// stored bytes.
        public var reusedChunks = 0
        public var reusedChunkBytes: Int64 = 0
        /// Changed files whose chunks would have been too scattered (``Fragmentation``): stored whole again.
        public var consolidatedFiles: [String] = []
    }

    public let options: Options
    /// The targets keys (at least the targets threshold) and the online key.
    let signers: Repository.Signers
    /// Published manifests this publish could not use (clients would refuse them), reported as warnings.
    let skipped = SkippedManifests()
    /// What the store left in place and consolidated.
    let reuse = ChunkReuseTally()

    public init(options: Options, signers: Repository.Signers) {
        self.options = options
        self.signers = signers
    }

    /// Runs the publish; progress goes to `progress` as (files done, files in all).
    public func run(progress: (Int, Int) -> Void = { _, _ in }) throws(PatchSyncError) -> Report {
        var repo = try Repository.open(origin: options.origin, for: "publishing \(options.buildId)")
        try repo.checkSigners(signers)  // before any work: keys that cannot sign would waste it
        let (folder, check) = try checkFolder(repo)
        if options.dryRun { return try dryRun(repo, folder: folder, check: check) }
        let sealing = try options.preload.map { preload throws(PatchSyncError) in
            try prepareSealing(preload, repo: repo)
        }
        defer { if let sealing { try? FileSystem.removeTree(sealing.scratch) } }  // plain new content, beside the key
        // New objects go to the origin, or for a preload to a folder beside its key, sealed from there.
        let root = sealing?.scratch ?? options.origin
        let (links, folders) = try folder.entries(bundles: options.bundles)
        let target = Manifest.targetPath(channel: options.channel, buildId: options.buildId)
        let sequence = nextSequence(repo)
        // Read once, for the delta packs and the manifest deltas, and as known layouts (a republish needs none).
        let bases = repo.targetFiles[target] == nil ? try deltaBases(repo, sequence: sequence) : []
        // What a publish killed before its manifest stored is put in place and reused (not for a preload:
        // its new objects are sealed from a scratch folder).
        let journal = sealing == nil ? LayoutJournal(origin: options.origin) : nil
        let recovered = sealing == nil ? LayoutJournal.recover(origin: options.origin) : [:]
        let known = try knownObjects(repo, loaded: bases, republishing: target, sealing: sealing, recovered: recovered)
        let (files, written, bytes) = try store(
            folder.files, into: root, known: known, sealing: sealing, journal: journal, progress: progress)
        var manifest = Manifest(
            formatVersion: Manifest.formatVersion, buildId: options.buildId,
            channel: options.channel, sequence: sequence, chunking: options.chunking,
            bundles: options.bundles.bundles, files: files, links: links, folders: folders)
        try Self.checkPublishable(manifest, folder: options.buildDirectory)
        var report = newReport(manifest, target: target, written: written, bytes: bytes, excluded: folder.excluded)
        if let existing = repo.targetFiles[target] {
            report.sequence = try checkSamePublish(target, existing, released: repo.releasedKeys, &manifest)
            report.alreadyPublished = true
            report.warnings = warnings(check, repo) + Self.unusedGlobs(options.exclude, folder) + keptNote(existing)
            journal?.finish(origin: options.origin)
            return report
        }
        let packs = try deltaPacks(for: files, from: bases, into: root)
        report.deltas = packs.map {
            DeltaReport(from: $0.source.from.value, files: $0.source.files, bytes: $0.source.length)
        }
        manifest.deltas = packs.isEmpty ? nil : packs.map(\.source)
        if let sealing {
            report.preload = try publishSealed(
                &manifest, sealing: sealing, bases: bases, packs: packs, target: target, repo: &repo)
            report.objectsWritten = sealing.written
            report.objectBytesWritten = sealing.bytesWritten
        } else {
            let relisted = try self.writer.write(
                manifest, target: target, repo: &repo, deltaBases: bases, published: publishNote)
            journal?.finish(origin: options.origin)
            report.relistedPreloads = relisted
        }
        report.warnings = warnings(check, repo) + Self.unusedGlobs(options.exclude, folder)
        return report
    }

    /// The report of a publish that stored `manifest`'s files (`written` objects, `bytes`).
    private func newReport(_ manifest: Manifest, target: String, written: Int, bytes: Int64, excluded: [String])
        -> Report
    {
        var report = Report(
            buildId: options.buildId.value, channel: options.channel.name,
            sequence: manifest.sequence, files: manifest.files.count, totalBytes: manifest.totalSize,
            objectsWritten: written, objectBytesWritten: bytes, alreadyPublished: false,
            manifestTarget: target)
        report.excluded = excluded
        (report.reusedChunks, report.reusedChunkBytes, report.consolidatedFiles) = reuse.figures
        return report
    }

    /// What the report warns of: the folder's check, manifests skipped as bases, metadata expiring soon.
    private func warnings(_ check: BuildFolderCheck, _ repo: Repository) -> [String] {
        check.warnings.map(\.description) + skipped.warnings + repo.expiryWarnings(now: options.now)
    }

    /// For a build published already: its description stays the one signed then, when another is given.
    private func keptNote(_ existing: TargetFile) -> [String] {
        guard let description = options.description, existing.custom?.published?.description != description else {
            return []
        }
        return ["build \(options.buildId) was already published: its description stays as it was signed"]
    }

    /// A warning for each --exclude glob that left nothing out (a typo, or a pattern of another tool).
    static func unusedGlobs(_ exclude: ExcludeRules, _ folder: BuildFolder) -> [String] {
        exclude.globs.filter { !folder.usedGlobs.contains($0) }.map {
            "--exclude '\($0)' matched nothing in \(folder.root) (only *, ? and ** are special)"
        }
    }

    /// Every check before any work, every problem of the folder at once: the channel, the keys of pending
    /// preloads a new build lists again, then the folder itself (a preload's key too).
    private func checkFolder(_ repo: Repository) throws(PatchSyncError) -> (BuildFolder, BuildFolderCheck) {
        try PublishNote.check(by: options.publisherName, description: options.description)
        try NewChannelCheck.check(options.channel, repo: repo, meant: options.newChannel, command: "publish")
        // A build listed below the channel's pending preloads lists them again above it: their keys first.
        if options.preload == nil {
            try PreloadRelisting(origin: options.origin, contentKeys: contentKeys).checkKeys(
                channel: options.channel.name, repo: repo)
        }
        // Every problem of the folder at once, before anything is chunked or written (a preload's key too).
        let folder = try BuildFolder.scan(
            options.buildDirectory, dereferenceExternal: options.dereferenceExternal, exclude: options.exclude)
        let check = BuildFolderCheck.of(folder, portable: options.portable)
        if let refusal = check.error(folder: options.buildDirectory) { throw refusal }
        try checkReplaceMost(folder, repo: repo)
        return (folder, check)
    }

    /// Chunks and stores the files' content as objects under `root` (packs for small files), reusing what
    /// `known` holds; returns the file entries, and the objects and bytes written.
    private func store(
        _ paths: [String], into root: String, known: KnownLayouts, sealing: Sealing?,
        journal: LayoutJournal?, progress: (Int, Int) -> Void
    ) throws(PatchSyncError) -> (files: [FileEntry], written: Int, bytes: Int64) {
        var writer = ObjectWriter(chunker: try Chunker(options.chunking), codec: options.codec, origin: root)
        writer.journal = journal
        writer.readsBack = { path, layout in StoredObject(path: path).isWhole(layout) }
        writer.segmented = sealing == nil  // a preload's plain objects are sealed whole
        writer.fragmentation = options.fragmentation
        // A preload's new objects are sealed whole: they take no chunks of others. A first publish has none to take.
        if sealing == nil && known.hasChunks {
            writer.storedChunks = Self.storedChunks(known, origin: root)
        }
        do { try ObjectWriter.prepare(origin: root) } catch {
            throw PatchSyncError.wrap(error).during("preparing \(OriginLayout(root: root).objectsFolder)")
        }
        let placer = ObjectPlacer(origin: root)
        let packer = PackWriter(origin: root, placer: placer, targetSize: options.packSize)
        packer.journal = journal
        let entries: [(FileEntry, Int64, [ObjectWriter.Pending])]
        do {
            entries = try self.entries(
                for: paths, writer: writer, known: known, sealing: sealing, placer: placer,
                packer: packer, progress: progress)
        } catch {
            _ = try? placer.finish()  // what was written is complete: in place, it is reused or replaced next time
            throw error
        }
        let files = entries.map(\.0)
        let stored = entries.map { ($0.1, $0.2) }
        CrashPoint.publishStored.reached()
        let dropped: Set<String>
        do { dropped = try placer.finish() } catch {
            throw PatchSyncError.wrap(error).during("placing the new objects")
        }
        let kept = stored.filter { $0.0 > 0 && !dropped.contains($0.1.first?.temp ?? "") }
        let (written, bytes) = (kept.count + packer.packsWritten, kept.reduce(packer.bytesWritten) { $0 + $1.0 })
        return (files, written, bytes)
    }

    /// Where a chunk of a large file an earlier build stored sits (``KnownLayouts/storedChunk(_:)``), when
    /// its object's segment in `origin` is long enough to hold it: listed builds' objects are there, and a
    /// damaged origin's missing or short one is not relied on (the chunk is written again).
    static func storedChunks(_ known: KnownLayouts, origin root: String) -> @Sendable (SHA256Digest) -> ChunkEntry? {
        let sizes = Mutex<[String: Int64]>([:]), origin = OriginLayout(root: root), naming = ObjectNaming.current
        return { sha in
            guard let chunk = known.storedChunk(sha), let object = chunk.object else { return nil }
            let segment = naming.segment(of: chunk.objectOffset)
            let path = origin.path(naming.path(object, segment: segment))
            let size = sizes.withLock { known in
                if let size = known[path] { return size }
                let size = (try? FileSystem.status(path)).flatMap { $0 }.map { Int64($0.st_size) } ?? -1
                known[path] = size
                return size
            }
            return chunk.objectOffset - naming.base(of: segment) + Int64(chunk.objectLength) <= size ? chunk : nil
        }
    }

    /// The manifest this build folder would get, computed without writing anything (for `diff`).
    public static func describe(
        buildDirectory: String, bundles: BundleRules, chunking: ChunkingParameters = .standard,
        dereferenceExternal: Bool = false, exclude: ExcludeRules = .none
    ) throws(PatchSyncError) -> Manifest {
        let writer = ObjectWriter(chunker: try Chunker(chunking), origin: "/nonexistent")
        var files: [FileEntry] = []
        let folder = try BuildFolder.scan(buildDirectory, dereferenceExternal: dereferenceExternal, exclude: exclude)
        let (links, folders) = try folder.entries(bundles: bundles)
        for path in folder.files {
            try Manifest.checkPath(path)
            let full = buildDirectory + "/" + path
            let mode: UInt32
            do { mode = UInt32(try FileDescriptor(path: full, flags: O_RDONLY).status().st_mode) & 0o755 } catch {
                throw PatchSyncError.wrap(error).during("reading \(full)")
            }
            let result = try writer.describe(file: full)
            files.append(
                FileEntry(
                    path: path, size: result.size, mode: mode, sha256: result.sha256, object: result.sha256,
                    bundle: try bundles.bundle(for: path).name, chunks: result.chunks))
        }
        guard let id = try? BuildID("local") else { throw PatchSyncError(.internal, "'local' is a valid build id") }
        let manifest = Manifest(
            formatVersion: Manifest.formatVersion, buildId: id, channel: .live, sequence: 0,
            chunking: chunking, bundles: bundles.bundles, files: files, links: links, folders: folders)
        try checkPublishable(manifest, folder: buildDirectory)
        return manifest
    }

    /// Runs the clients' own manifest validation before anything is signed: a build folder that
    /// players would refuse (two names differing only in case, a link clashing with a folder, a link
    /// that resolves outside) is refused here, with what to rename, and never reaches the origin.
    static func checkPublishable(_ manifest: Manifest, folder: String) throws(PatchSyncError) {
        do { try manifest.validate() } catch {
            var refusal = error
            refusal.message = "\(folder) cannot be published: players would refuse its \(error.message)"
            refusal.remedy = "rename or remove that path in the build folder, then publish again"
            throw refusal
        }
    }

    /// The manifest entries of `paths`, in order, computed on every core while this thread takes them
    /// in path order: each new object goes to `placer` as soon as it is written, and new small files go
    /// to `packer` in path order. Each worker takes the next file, so one large file never keeps the
    /// other cores waiting, and none waits for this thread's packing; workers stay within ``window``
    /// files and ``windowBytes`` of small files' stored bytes ahead of it, so memory stays bounded
    /// whatever the build. `progress` runs on the calling thread.
    private func entries(
        for paths: [String], writer: ObjectWriter, known: KnownLayouts, sealing: Sealing?,
        placer: ObjectPlacer, packer: PackWriter,
        progress: (Int, Int) -> Void
    ) throws(PatchSyncError) -> [(FileEntry, Int64, [ObjectWriter.Pending])] {
        typealias Entry = (FileEntry, Int64, [ObjectWriter.Pending])
        var out = [Entry?](repeating: nil, count: paths.count)
        let workers = max(1, min(8, ProcessInfo.processInfo.activeProcessorCount))
        let queue = PrepareQueue(count: paths.count, workers: workers)
        for number in 0..<workers {
            let thread = Thread {
                while let i = queue.claim() {
                    let result = Result { () throws(PatchSyncError) -> Prepared in
                        try self.entry(for: paths[i], writer: writer, known: known, sealing: sealing)
                    }
                    if case .success(.entry(_, _, let pending)) = result { for one in pending { placer.add(one) } }
                    queue.deliver(i, result)
                }
                queue.workerEnded()
            }
            thread.name = "patchsync-publish-\(number)"
            thread.start()
        }
        defer { queue.stop() }  // and wait for the workers: nothing reaches the placer after this returns
        for i in paths.indices {
            switch try queue.take(i) {
            case .entry(let entry, let bytes, let pending): out[i] = (entry, bytes, pending)
            case .small(let entry, let stored): try packer.add(index: i, entry: entry, stored: stored)
            }
            for (j, entry) in packer.takeFinished() { out[j] = (entry, 0, []) }
            progress(i + 1, paths.count)
        }
        try packer.close()
        for (i, entry) in packer.takeFinished() { out[i] = (entry, 0, []) }
        // Into an array of the final size at once: grown by doubling, it cost 53 MB at 200,000 files.
        var entries: [Entry] = []
        entries.reserveCapacity(paths.count)
        for case let entry? in out { entries.append(entry) }
        guard entries.count == paths.count else { throw PatchSyncError(.internal, "a file was not published") }
        return entries
    }

    static let window = 1024
    static let windowBytes = 64 << 20

    /// What a worker made of one file: a finished entry (a reused or a newly written object), or a
    /// small file's entry and stored bytes, for a pack.
    private enum Prepared: Sendable {
        case entry(FileEntry, Int64, [ObjectWriter.Pending])
        case small(FileEntry, [UInt8])
    }

    /// Hands the files' indices to the workers in order, and their results to the consuming thread in
    /// order. A worker claims the next index only while it is within ``window`` of the next to be
    /// taken and the small files' bytes held are under ``windowBytes``, or when it is the very next
    /// to be taken (so the oldest file always goes ahead and nothing deadlocks). A failure stops the
    /// claims and is thrown to the consumer.
    ///
    /// Thread-safety: a ``ConditionLock`` holds the counters and the results; workers and the consumer wait on it.
    private final class PrepareQueue: Sendable {
        private struct State {
            var next = 0
            var taken = 0
            var heldBytes = 0
            var results: [Int: Result<Prepared, PatchSyncError>] = [:]
            var failure: PatchSyncError?
            var stopping = false
            var running: Int
        }
        private let count: Int
        private let lock: ConditionLock<State>

        init(count: Int, workers: Int) {
            self.count = count
            lock = ConditionLock(State(running: workers))
        }

        /// The next file for a worker, once it is its turn; nil when there is none (or a failure stopped the publish).
        func claim() -> Int? {
            lock.withLock(when: { state in
                state.stopping || state.next >= self.count
                    || (state.next < state.taken + Publisher.window
                        && (state.heldBytes < Publisher.windowBytes || state.next == state.taken))
            }) { state -> Int? in
                guard !state.stopping, state.next < self.count else { return nil }
                defer { state.next += 1 }
                return state.next
            }
        }

        func deliver(_ index: Int, _ result: Result<Prepared, PatchSyncError>) {
            lock.withLock { state in
                if case .success(.small(_, let stored)) = result { state.heldBytes += stored.count }
                if case .failure(let error) = result {
                    state.failure = state.failure ?? error
                    state.stopping = true
                }
                state.results[index] = result
            }
            lock.broadcast()
        }

        /// The result for file `index`, once a worker delivered it; throws the first failure.
        func take(_ index: Int) throws(PatchSyncError) -> Prepared {
            let result = lock.withLock(when: { $0.results[index] != nil || $0.failure != nil }) { state in
                if let failure = state.failure { return Result<Prepared, PatchSyncError>.failure(failure) }
                guard let result = state.results.removeValue(forKey: index) else {
                    return .failure(PatchSyncError(.internal, "file \(index) was taken twice"))
                }
                if case .success(.small(_, let stored)) = result { state.heldBytes -= stored.count }
                state.taken = index + 1
                return result
            }
            lock.broadcast()
            return try result.get()
        }

        func workerEnded() {
            lock.withLock { $0.running -= 1 }
            lock.broadcast()
        }

        /// Ends the claims (after the last file, or when the consumer failed) and waits for the workers.
        func stop() {
            lock.withLock { $0.stopping = true }
            lock.broadcast()
            lock.withLock(when: { $0.running == 0 }) { _ in }
        }
    }

    /// The file's manifest entry. When the file's content is already in the origin (its own object, or
    /// a pack that the newest manifests place it in), a manifest there gives its layout and it is reused
    /// as it is, never recompressed: an object path names one set of bytes. An object that no manifest
    /// describes was left by a publish that stopped before its manifest; it is written again and
    /// replaced. A new file up to ``Options/smallFileBytes`` is chunked and deflated into memory for a pack.
    private func entry(
        for path: String, writer: ObjectWriter, known: KnownLayouts,
        sealing: Sealing?
    ) throws(PatchSyncError) -> Prepared {
        let full = options.buildDirectory + "/" + path
        let (mode, size, sha, content) = try read(full, hashing: !known.isEmpty)
        let bundle = try options.bundles.bundle(for: path).name
        let origin = OriginLayout(root: options.origin)
        if let sha, let old = try known.layout(of: sha, readingOlder: FileSystem.exists(origin.objectFile(sha))),
            ObjectNaming.current.paths(of: old).allSatisfy({ FileSystem.exists(origin.path($0)) })
                || sealing?.reuse(old.object) == true
        {
            let largest = old.chunks.map(\.length).max() ?? 0
            guard largest <= options.chunking.maxSize else {
                throw PatchSyncError(
                    .usage,
                    "\(path) is already in the origin as object \(sha), in chunks of up to "
                        + "\(largest) bytes; this publish's chunking allows at most \(options.chunking.maxSize)",
                    remedy: "publish with --chunk-size \((largest + 4095) / 4096) or more (chunks may reach "
                        + "4× the average size), or into a new origin")
            }
            return .entry(
                FileEntry(
                    path: path, size: old.size, mode: mode, sha256: sha, object: old.object, bundle: bundle,
                    chunks: old.chunks), 0, [])
        }
        // A small file goes into a pack; a changed large file too when its new chunks are few.
        let destination: ObjectWriter.Destination =
            size <= Int64(options.smallFileBytes)
            ? .pack
            : options.smallFileBytes > 0 && writer.storedChunks != nil ? .packUpTo(options.smallFileBytes) : .object
        let stored = try Self.withContent(content) { bytes throws(PatchSyncError) in
            try writer.store(file: full, knownHash: sha, bytes: bytes, into: destination)
        }
        switch stored {
        case .packed(let result, let bytes): return packed(result, bytes, path: path, mode: mode, bundle: bundle)
        case .written(let result):
            reuse.add(result, path: path)
            return .entry(
                FileEntry(
                    path: path, size: result.size, mode: mode, sha256: result.sha256, object: result.object,
                    bundle: bundle, chunks: result.chunks), result.bytesWritten, result.pending)
        }
    }

    /// A file chunked into memory (``ObjectWriter/collect(file:knownHash:bytes:)``): its new chunks' stored
    /// bytes for a pack, or, when every chunk is stored already, its entry as it is (no pack).
    private func packed(_ result: ObjectWriter.Result, _ stored: [UInt8], path: String, mode: UInt32, bundle: String)
        -> Prepared
    {
        reuse.add(result, path: path)
        if stored.isEmpty, let first = result.chunks.first?.object {
            return .entry(
                FileEntry(
                    path: path, size: result.size, mode: mode, sha256: result.sha256, object: first,
                    bundle: bundle, chunks: result.chunks.map { $0.object == first ? $0.withoutObject : $0 }),
                0, [])
        }
        return .small(
            FileEntry(
                path: path, size: result.size, mode: mode, sha256: result.sha256, object: result.sha256,
                bundle: bundle, chunks: result.chunks), stored)
    }

    /// The file's mode and size and, when `hashing`, its SHA-256; a file up to ``wholeFileBytes`` is read
    /// once into memory (`content`), hashed, and chunked from there when its content is new, a larger one
    /// is hashed, then read again only when new. Through a link that --dereference-external copies.
    private func read(_ full: String, hashing: Bool) throws(PatchSyncError)
        -> (mode: UInt32, size: Int64, sha: SHA256Digest?, content: [UInt8]?)
    {
        let mode: UInt32, sha: SHA256Digest?, size: Int64
        var content: [UInt8]? = nil
        do {
            // Through a link that --dereference-external copies: what it points to.
            var st = stat()
            guard stat(full, &st) == 0 else { throw Errno(errno, "reading", full) }
            mode = UInt32(st.st_mode) & 0o755
            size = Int64(st.st_size)
            // Hashing first only pays when a manifest in the origin may already describe this content.
            if !hashing {
                sha = nil
            } else if size <= Self.wholeFileBytes {
                let bytes = try Self.readWhole(full, size: size)
                sha = bytes.withUnsafeBytes { SHA256Hasher.hash($0) }
                content = bytes
            } else {
                sha = try SHA256Hasher.hash(file: full)
            }
        } catch { throw PatchSyncError.wrap(error).during("reading \(full)") }
        return (mode, size, sha, content)
    }

    /// Files up to this size are read once into memory to be hashed and, when new, chunked from there.
    static let wholeFileBytes: Int64 = 32 << 20

    /// The whole content of `path`, `size` bytes (a file that changes meanwhile is refused).
    static func readWhole(_ path: String, size: Int64) throws(Errno) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: Int(size))
        let file = try FileDescriptor(path: path, flags: O_RDONLY)
        let read = bytes.withUnsafeMutableBytes { buffer in
            Result { () throws(Errno) -> Int in try file.readFully(into: buffer) }
        }
        guard try read.get() == Int(size) else { throw Errno(EAGAIN, "reading (it changed while it was read)", path) }
        return bytes
    }

    /// Runs `body` with `content`'s bytes, or nil when there is none (the file is read as it is chunked).
    static func withContent<T>(
        _ content: [UInt8]?, _ body: (UnsafeRawBufferPointer?) throws(PatchSyncError) -> T
    ) throws(PatchSyncError) -> T {
        guard let content else { return try body(nil) }
        let result = content.withUnsafeBytes { bytes in Result { () throws(PatchSyncError) -> T in try body(bytes) } }
        return try result.get()
    }

    /// The layouts of the objects that manifests in the origin describe (``KnownLayouts``).
    /// A preload publish also reads the preloads before it, with their keys from the key folder, and
    /// may share their sealed objects; any other publish leaves preloads out (their objects are sealed).
    private func knownObjects(
        _ repo: Repository, loaded bases: [DeltaBase], republishing target: String,
        sealing: Sealing?, recovered: [SHA256Digest: FileEntry]
    ) throws(PatchSyncError) -> KnownLayouts {
        let loaded = Dictionary(bases.map { ($0.path, $0.manifest) }, uniquingKeysWith: { a, _ in a })
        let released = repo.releasedKeys
        let targets = repo.targetFiles.filter { entry in
            guard let info = entry.value.custom, info.preload != nil else { return true }
            return sealing != nil && info.channel == options.channel.name  // its key is this channel's
        }
        let skipped = self.skipped
        return try KnownLayouts(
            targets: targets, first: target, recovered: recovered, indexingChunks: sealing == nil
        ) {
            (path, target) throws(PatchSyncError) -> Manifest? in
            if let manifest = loaded[path] { return manifest }
            let manifest: Manifest
            do throws(PatchSyncError) {
                manifest = try Repository.manifest(
                    in: self.options.origin, path, target,
                    contentKeys: self.options.preload?.contentKeys, released: released)
            } catch  where error.code == .refusedData && target.custom?.preload == nil {
                // A published manifest clients would refuse never wedges a publish: its objects are not reused.
                skipped.add(path, error)
                return nil
            }
            sealing?.learn(manifest, channel: self.options.channel)
            return manifest
        }
    }

    func nextSequence(_ repo: Repository) -> Int {
        ChannelListing(repo, channel: options.channel.name).highestSequence + 1
    }

    /// A build id published before must have the same content: re-running publish is a no-op.
    /// The delta packs are left out of the comparison: they depend on the builds published since.
    private func checkSamePublish(
        _ target: String, _ existing: TargetFile, released: [String: TargetFile],
        _ manifest: inout Manifest
    ) throws(PatchSyncError) -> Int {
        let published = try Repository.manifest(
            in: options.origin, target, existing, contentKeys: options.preload?.contentKeys,
            released: released)
        manifest.sequence = published.sequence
        manifest.deltas = published.deltas
        manifest.sealed = published.sealed
        manifest.formatVersion = published.formatVersion  // a build published before packs: same content, older format
        guard manifest == published else {
            throw PatchSyncError(
                .usage,
                "build \(options.buildId) is already published on \(options.channel) "
                    + "with other content", remedy: "give the new build a new --build-id")
        }
        return manifest.sequence
    }

    /// Who publishes this build, when, and what it is, as its target records it.
    var publishNote: PublishNote {
        let host = ProcessInfo.processInfo.hostName
        return PublishNote(
            at: options.now, by: options.publisherName ?? (host.isEmpty ? "an unnamed host" : host),
            description: options.description)
    }

    /// The one writer of targets this publish signs with.
    var writer: TargetWriter {
        var writer = TargetWriter(
            origin: options.origin, signers: signers, keepBuilds: options.keepBuilds, now: options.now)
        writer.contentKeys = contentKeys
        return writer
    }

    /// The publisher's content-key folder: a preload's, the one given, or the one a preload publish recorded.
    var contentKeys: String? {
        options.preload?.contentKeys ?? options.contentKeys ?? Repository.recordedContentKeys(origin: options.origin)
    }

    /// The targets of builds beyond the newest `keep` (by sequence) of their channel, as players read
    /// the channels (``ChannelListing``); `installable` tells a plain build or a released preload.
    static func beyondKept(_ targets: [String: TargetFile], keep: Int, installable: (ManifestTargetInfo) -> Bool)
        -> [String]
    {
        // Pending preloads (not released yet) are no installable build: they never count toward `keep`
        // and are never unlisted by it; the newest `keep` installable builds of each channel stay.
        Set(targets.values.compactMap { $0.custom?.channel }).sorted().flatMap { channel in
            ChannelListing.builds(targets, channel: channel, released: installable).filter(\.installable)
                .dropFirst(max(1, keep)).map(\.path)
        }
    }
}

/// The published manifests a publish skipped, with why.
///
/// Thread-safety: a `Mutex` holds the list; known layouts are read from worker threads.
/// What a publish's files left in place (chunks earlier builds stored) and stored whole again.
final class ChunkReuseTally: Sendable {
    private let state = Mutex<(chunks: Int, bytes: Int64, consolidated: [String])>((0, 0, []))

    func add(_ result: ObjectWriter.Result, path: String) {
        state.withLock {
            $0.chunks += result.reusedChunks
            $0.bytes += result.reusedBytes
            if result.consolidated { $0.consolidated.append(path) }
        }
    }

    var figures: (Int, Int64, [String]) { state.withLock { ($0.chunks, $0.bytes, $0.consolidated.sorted()) } }
}

final class SkippedManifests: Sendable {
    private let list = Mutex<[String]>([])

    func add(_ path: String, _ error: PatchSyncError) {
        list.withLock {
            let why = error.code == .refusedData ? "clients would refuse it" : "it cannot be read"
            $0.append("\(path): skipped, \(why) (\(error.message)); it gives this build no deltas or objects")
        }
    }

    var warnings: [String] { list.withLock { $0 } }
}
