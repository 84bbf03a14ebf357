import Foundation
import Logging

extension Syncer {
    static let logger = Logger(label: "patchsync.sync")

    /// Plans and executes the staging of `manifest` into `staged`, then marks it ready: links of
    /// unchanged files, deltas from the live build, chunks copied locally, then chunks fetched. With
    /// `recycling`, a new staging starts in the folder of a kept build rollback does not need
    /// (``Install/recycleSlot(for:buildsKept:)``): its files the build has unchanged stay untouched.
    /// The live files are `live`, or checked here when nil or when staging in a recycled folder (then
    /// only those that may give what the files not in place need).
    func stage(
        _ manifest: Manifest, into staged: StagedBuild, live checked: LiveTree?, context: SyncContext,
        report: inout SyncReport, step: [String]? = nil, recycling: Bool = false
    ) async throws(PatchSyncError) {
        let id = staged.identity.name
        let start = try StagingStart.of(
            manifest, staged: staged, install: install, live: checked, context: context, recycling: recycling)
        let (tree, unchanged, live) = (start.tree, start.unchanged, start.live)
        let routesOnly = Plan(
            manifest: manifest, live: live.linkable, liveChunks: live.chunks, done: [], pending: start.pending)
        let resumed = try Self.resume(staged, routesOnly.assembled, in: tree)
        let update = UpdatePlan(manifest: manifest, local: live, done: resumed.done, pending: start.pending)
        var plan = update.plan
        try PatchSyncError.step("staging \(id)") { () throws(PatchSyncError) in
            try checkFreeSpace(for: plan, in: staged.directory)
            try link(plan.links, into: tree)
        }
        if let step {
            try context.totals?.begin(step, plan: plan, downloading: update.downloadBytes, live: live)
        }
        // A disk that fills on the way says how much the build still needs (what this run has not
        // written yet) and what is free.
        let needed = plan.bytesToWrite + StagedFiles.slackBytes
        var writing: StagedFiles?
        do {
            let files = StagedFiles(staged, tree: tree, creating: resumed.toCreate)
            writing = files
            defer { files.closeAll() }
            let deltas = try await applyDeltas(manifest, plan: plan, live: live, files: files, context: context)
            (report.filesPatched, report.deltaFallbacks, report.deltaBytes) = (
                deltas.files, deltas.fellBack, deltas.packBytes
            )
            // Named by the deployment's folder in the state; a status shows its build id.
            let routes = InstallStatus.Routes(
                buildId: id, linked: plan.links.count + unchanged, delta: deltas.files,
                chunks: plan.assembled.count - deltas.files)
            try context.state.update { $0.recordRoutes(routes) }
            if deltas.chunks > 0 {  // what is left after the deltas: chunks only
                try files.flush()
                plan = Plan(
                    manifest: manifest, live: live.linkable, liveChunks: live.chunks,
                    done: try staged.recorded(manifest), pending: start.pending)
            }
            try await fetch(
                manifest, plan: plan, files: files, context: context, before: deltas.progressBytes, report: &report)
            report.filesLinked += unchanged  // unchanged, as linked ones are
            try files.flush()
            try finish(manifest, staged: staged, start: start, plan: plan)
        } catch {
            guard error.reason == .diskFull, error.requiredBytes == nil else { throw error }
            var full = error
            full.requiredBytes = max(StagedFiles.slackBytes, needed - (writing?.bytesWritten ?? 0))
            full.availableBytes = FileSystem.freeBytes(at: staged.directory)
            throw full
        }
    }

    /// What a killed run of this staging wrote that still holds (``StagedBuild/prepare(_:in:)``).
    private static func resume(_ staged: StagedBuild, _ files: [FileEntry], in tree: TreeRoot) throws(PatchSyncError)
        -> StagedBuild.Prepared
    {
        let resumed = try staged.prepare(files, in: tree)
        if resumed.filesVouched + resumed.filesReread > 0 {
            logger.info(
                "resuming \(staged.identity.name): \(resumed.filesVouched) staged files unchanged since their last flush, \(resumed.filesReread) read again (\(resumed.bytesReread) bytes)"
            )
        }
        return resumed
    }

    /// Fetches what `plan` still needs: chunks copied from local files first, the rest from the sources
    /// (the preload store, LAN peers, the origin), with the report's counts of where the bytes came from.
    private func fetch(
        _ manifest: Manifest, plan: Plan, files: StagedFiles, context: SyncContext, before: Int64,
        report: inout SyncReport
    ) async throws(PatchSyncError) {
        var fetchPlan = plan
        fetchPlan.fetch += try copyLocal(plan.local, files: files)
        report.buildBytes = manifest.totalSize
        report.filesLinked = plan.links.count
        report.filesAssembled = plan.assembled.count
        report.chunksCopiedLocally = plan.local.count - (fetchPlan.fetch.count - plan.fetch.count)
        report.chunksFetched = fetchPlan.fetch.count
        report.bytesPlanned = fetchPlan.bytesToFetch
        let requests = fetchPlan.requests(
            gap: context.config.gapBytes, maxBytes: context.config.requestBytes,
            naming: ObjectNaming(format: manifest.formatVersion))
        report.requests = requests.count
        let peersBefore = context.peers?.bytes ?? 0
        let sources = context.sources(for: manifest)
        context.onEvent(
            .phase(
                .fetching,
                "fetching \(fetchPlan.fetch.count) chunks (\(fetchPlan.bytesToFetch) bytes) in \(requests.count) requests"
            ))
        try await ChunkFetcher(
            sources: sources, files: files, limit: context.config.connections, onEvent: context.onEvent,
            meter: context.meter
        ).run(requests, total: fetchPlan.bytesToFetch, before: before)
        // The content fetched, as installed: what peers delivered in this step, the origin the rest.
        let fetched = fetchPlan.fetch.reduce(Int64(0)) {
            $0 + Int64($1.chunk.length) * Int64($1.destinations.count)
        }
        report.bytesFromPeers = (context.peers?.bytes ?? 0) - peersBefore
        report.bytesFromPreload = sources.reduce(0) { $0 + (($1 as? PreloadChunks)?.delivered.total ?? 0) }
        report.bytesFromOrigin = fetched - report.bytesFromPeers - report.bytesFromPreload
    }

    /// Refuses to start staging when the disk cannot hold the new content (linked files cost
    /// nothing; chunks already written are not counted again).
    private func checkFreeSpace(for plan: Plan, in directory: String) throws(PatchSyncError) {
        let needed = plan.bytesToWrite + StagedFiles.slackBytes
        guard let free = FileSystem.freeBytes(at: directory) else {
            throw PatchSyncError.wrap(Errno(errno, "checking free space of", directory))
        }
        guard free >= needed else {
            throw PatchSyncError.diskFull(
                "not enough disk space in \(directory): the build needs \(ByteCount.format(needed)), "
                    + "\(ByteCount.format(free)) are free", required: needed, available: free)
        }
    }

    /// Hard-links unchanged files from the live tree (``StagedLinks``).
    private func link(_ links: [Plan.Link], into tree: TreeRoot) throws(PatchSyncError) {
        try StagedLinks.link(links, into: tree, layout: install.layout)
    }

    /// Copies chunks from verified live files; a chunk that no longer matches is returned to be fetched.
    private func copyLocal(
        _ local: [(Plan.Need, Plan.LocalChunk)],
        files: StagedFiles
    ) throws(PatchSyncError) -> [Plan.Need] {
        var unavailable: [Plan.Need] = []
        var buffer = [UInt8]()
        for (need, source) in local {
            if Task.isCancelled { throw PatchSyncError.cancelled }  // what is written is recorded on close
            buffer = [UInt8](repeating: 0, count: need.chunk.length)
            let ok: Bool = buffer.withUnsafeMutableBytes { raw in
                guard let fd = try? FileDescriptor(path: source.path, flags: O_RDONLY),
                    (try? fd.read(into: raw, at: source.offset)) != nil
                else { return false }
                return SHA256Hasher.hash(UnsafeRawBufferPointer(raw)) == need.chunk.sha256
            }
            guard ok else {
                unavailable.append(need)
                continue
            }
            let result: PatchSyncError? = buffer.withUnsafeBytes { raw in
                do throws(PatchSyncError) {
                    try files.write(raw, chunk: need.chunk.sha256, to: need.destinations)
                    return nil
                } catch {
                    return error
                }
            }
            if let result { throw result }
        }
        return unavailable
    }

    /// Makes the staged tree final (modes, fsync, stat cache) and marks the build ready, with its files'
    /// records, in one transaction; the ready build it replaces is left for housekeeping. In a recycled
    /// folder, the files in place unchanged keep the records they have (no stat, no row written).
    private func finish(_ manifest: Manifest, staged: StagedBuild, start: StagingStart, plan: Plan)
        throws(PatchSyncError)
    {
        let id = staged.identity.name, directory = staged.directory, tree = start.tree
        let done = try staged.recorded(manifest)
        var stats: [String: StateStore.FileStat] = [:]
        try PatchSyncError.step("finishing \(id)") { () throws(PatchSyncError) in
            var modes = TreeRoot.FolderMemo()
            for file in plan.assembled {
                for index in file.chunks.indices where !done.contains(.init(path: file.path, index: index)) {
                    throw PatchSyncError(.internal, "\(file.path) chunk \(index) was never written")
                }
                // Its bytes are written (not synced: the syncfs below does it for the whole tree); only the mode is left.
                do { try tree.setMode(file.path, mode_t(Plan.installedMode(file.mode)), memo: &modes) } catch {
                    throw PatchSyncError.wrap(error)
                }
            }
            let folders = try TreeEntries.placeAll(manifest, in: tree, directory: directory)
            let files = start.pending ?? manifest.files
            stats.reserveCapacity(files.count)
            // A linked file is the live inode it was linked from: it takes the record that one was verified with.
            for link in plan.links { stats[link.path] = start.live.records[link.source] }
            var memo = TreeRoot.FolderMemo()
            for file in files where stats[file.path] == nil {
                do {
                    guard let st = try tree.status(file.path, memo: &memo), (st.st_mode & S_IFMT) == S_IFREG else {
                        throw Errno(ENOENT, "finding the staged file", tree.full(file.path))
                    }
                    stats[file.path] = StateStore.FileStat(st)
                } catch { throw PatchSyncError.wrap(error) }
            }
            try syncTree(tree, folders: folders, staged: staged)
        }
        let seal = TreeSeal.of(directory)
        let replaced = start.replaced
        try staged.state.update(
            .stagingFinished,
            records: { (t, state) throws(PatchSyncError) in
                guard state.staging?.name == id else {
                    throw PatchSyncError(.internal, "\(id) is no longer the build being staged")
                }
                let key = state.recordsKey(of: id)
                try StateStore.forgetFiles(t, build: key, replaced)
                try StateStore.saveStatCache(t, build: key, stats)
                try StateStore.saveBuildFiles(
                    t, build: key,
                    (start.pending ?? manifest.files).lazy.map {
                        StateStore.BuildFile(
                            path: $0.path, size: $0.size, mode: Plan.installedMode($0.mode), sha256: $0.sha256.hex)
                    })
            }
        ) { _ = $0.finishStaging(id, seal: seal) }
    }

    /// The one sync of the staging: every file's bytes and the modes set, then each folder. Through the
    /// tree's descriptor, opened before the files were written, so that a writeback error while they were
    /// written is reported here. On an error the records go: pages whose writeback failed may still read
    /// back right from the page cache, so no hash can vouch for them; the next run fetches their chunks again.
    private func syncTree(_ tree: TreeRoot, folders: Set<String>, staged: StagedBuild) throws(PatchSyncError) {
        do {
            do { try tree.syncFileSystem() } catch {
                try? staged.state.forgetRecords(staged.identity.name)
                throw error
            }
            for folder in folders {
                guard let fd = try tree.folder(folder) else {
                    throw Errno(ENOENT, "finding the staged folder", tree.full(folder))
                }
                try fd.sync()
            }
        } catch { throw PatchSyncError.wrap(error) }
    }
}
