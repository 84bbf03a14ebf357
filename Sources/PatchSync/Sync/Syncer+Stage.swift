import Foundation

extension Syncer {
    /// Plans and executes the staging of `manifest`, then marks it ready.
    func stage(_ manifest: Manifest, as id: String, live: LiveTree, state: StateStore, origin: Origin,
               config: InstallConfig, report: inout SyncReport,
               onEvent: @escaping @Sendable (SyncEvent) -> Void) async throws(PatchSyncError) {
        let directory = install.stagedDirectory(id)
        var plan = Plan(manifest: manifest, live: live.files, liveChunks: live.chunks,
                        done: try state.doneChunks(build: id))
        let files = StagedFiles(directory: directory, build: id, state: state)
        defer { files.closeAll() }
        try PatchSyncError.step("staging \(id)") { () throws(PatchSyncError) in
            do {
                try FileSystem.makeDirectory(install.stagingDirectory)
                try FileSystem.makeDirectory(directory, within: install.stagingDirectory)
            } catch { throw PatchSyncError.wrap(error) }
            try checkFreeSpace(for: plan, in: directory)
            try link(plan.links, into: directory)
            for file in plan.assembled { try files.prepare(file) }
        }
        let deltas = try await applyDeltas(manifest, plan: plan, live: live, files: files, state: state,
                                           origin: origin, onEvent: onEvent)
        (report.filesPatched, report.deltaFallbacks, report.deltaBytes) = (deltas.files, deltas.fellBack, deltas.packBytes)
        let routes = InstallStatus.Routes(buildId: id, linked: plan.links.count, delta: deltas.files,
                                          chunks: plan.assembled.count - deltas.files)
        if let json = try? JSONEncoder().encode(routes) { try state.set(["routes": String(decoding: json, as: UTF8.self)]) }
        if deltas.chunks > 0 {  // what is left after the deltas: chunks only
            try files.flush()
            plan = Plan(manifest: manifest, live: live.files, liveChunks: live.chunks, done: try state.doneChunks(build: id))
        }
        var fetch = plan.fetch
        fetch += try copyLocal(plan.local, files: files)
        var fetchPlan = plan
        fetchPlan.fetch = fetch
        report.buildBytes = manifest.totalSize
        report.filesLinked = plan.links.count
        report.filesAssembled = plan.assembled.count
        report.chunksCopiedLocally = plan.local.count - (fetch.count - plan.fetch.count)
        report.chunksFetched = fetch.count
        report.bytesPlanned = fetchPlan.bytesToFetch
        let requests = fetchPlan.requests(gap: config.gapBytes, maxBytes: config.requestBytes)
        report.requests = requests.count
        onEvent(.phase("fetching \(fetch.count) chunks (\(fetchPlan.bytesToFetch) bytes) in \(requests.count) requests"))
        try await ChunkFetcher(origin: origin, files: files, limit: config.connections, onEvent: onEvent)
            .run(requests, total: fetchPlan.bytesToFetch, before: deltas.progressBytes)
        try files.flush()
        try finish(manifest, as: id, plan: plan, directory: directory, state: state)
    }

    /// The verified content of the live build, through the stat cache.
    func liveTree(state: StateStore) throws(PatchSyncError) -> LiveTree {
        guard let current = install.currentDeployment(),
              let manifest = try? loadManifest(Deployment.buildID(of: current)) else { return LiveTree() }
        return try LiveTree(manifest: manifest, directory: install.buildDirectory(current), build: current, state: state)
    }

    /// Refuses to start staging when the disk cannot hold the new content (linked files cost
    /// nothing; chunks already written are not counted again).
    private func checkFreeSpace(for plan: Plan, in directory: String) throws(PatchSyncError) {
        let needed = plan.bytesToWrite + StagedFiles.slackBytes
        var fs = statvfs()
        guard statvfs(directory, &fs) == 0 else { throw PatchSyncError.wrap(Errno(errno, "checking free space of", directory)) }
        let free = Int64(fs.f_bavail) * Int64(fs.f_frsize)
        guard free >= needed else {
            throw PatchSyncError(.localIO, "not enough disk space in \(directory): the build needs \(needed) bytes, "
                                 + "\(free) are free", remedy: "free at least \(needed - free) bytes, then run sync again; "
                                 + "the live build is untouched and progress is kept")
        }
    }

    func loadManifest(_ build: String) throws(PatchSyncError) -> Manifest {
        try Manifest.decode(try FileSystem.read(install.manifestPath(build), limit: 256 << 20),
                            what: install.manifestPath(build))
    }

    /// Hard-links unchanged files from the live tree (they are read-only there).
    private func link(_ links: [Plan.Link], into directory: String) throws(PatchSyncError) {
        do {
            for link in links {
                let target = directory + "/" + link.path
                if let st = try FileSystem.status(target), let src = try FileSystem.status(link.source),
                   st.st_ino == src.st_ino { continue }
                try FileSystem.remove(target)
                try FileSystem.makeDirectory((target as NSString).deletingLastPathComponent, within: directory)
                try FileSystem.link(link.source, target)
            }
        } catch { throw PatchSyncError.wrap(error) }
    }

    /// Copies chunks from verified live files; a chunk that no longer matches is returned to be fetched.
    private func copyLocal(_ local: [(Plan.Need, Plan.LocalChunk)],
                           files: StagedFiles) throws(PatchSyncError) -> [Plan.Need] {
        var unavailable: [Plan.Need] = []
        var buffer = [UInt8]()
        for (need, source) in local {
            if Task.isCancelled { throw PatchSyncError.cancelled }  // what is written is recorded on close
            buffer = [UInt8](repeating: 0, count: need.chunk.length)
            let ok: Bool = buffer.withUnsafeMutableBytes { raw in
                guard let fd = try? FileDescriptor(path: source.path, flags: O_RDONLY),
                      (try? fd.read(into: raw, at: source.offset)) != nil else { return false }
                return SHA256Hasher.hash(UnsafeRawBufferPointer(raw)) == need.chunk.sha256
            }
            guard ok else { unavailable.append(need); continue }
            let result: PatchSyncError? = buffer.withUnsafeBytes { raw in
                do throws(PatchSyncError) { try files.write(raw, to: need.destinations); return nil } catch {
                    return error
                }
            }
            if let result { throw result }
        }
        return unavailable
    }

    /// Makes the staged tree final (modes, fsync, stat cache) and marks the build ready.
    private func finish(_ manifest: Manifest, as id: String, plan: Plan, directory: String,
                        state: StateStore) throws(PatchSyncError) {
        let done = try state.doneChunks(build: id)
        var stats: [String: StateStore.FileStat] = [:]
        var folders = Set([directory])
        try PatchSyncError.step("finishing \(id)") { () throws(PatchSyncError) in
            for file in plan.assembled {
                for index in file.chunks.indices where !done.contains(.init(path: file.path, index: index)) {
                    throw PatchSyncError(.internal, "\(file.path) chunk \(index) was never written")
                }
                let full = directory + "/" + file.path
                // Its bytes were synced before its chunks were recorded done; only the mode is left.
                do { try FileSystem.setMode(full, mode_t(Install.installedMode(file.mode))) } catch {
                    throw PatchSyncError.wrap(error)
                }
            }
            for file in manifest.files {
                let full = directory + "/" + file.path
                var folder = (full as NSString).deletingLastPathComponent
                while folder.count > directory.count && folders.insert(folder).inserted {
                    folder = (folder as NSString).deletingLastPathComponent
                }
                do {
                    guard let st = try FileSystem.status(full) else { throw Errno(ENOENT, "finding", full) }
                    stats[file.path] = StateStore.FileStat(st)
                } catch { throw PatchSyncError.wrap(error) }
            }
            do {
                try FileSystem.syncFileSystem(of: directory)  // the modes set above
                for folder in folders { try FileSystem.syncDirectory(folder) }
            } catch { throw PatchSyncError.wrap(error) }
        }
        try state.saveStatCache(build: id, stats)
        try state.saveBuildFiles(build: id, manifest.files.map {
            StateStore.BuildFile(path: $0.path, size: $0.size, mode: Install.installedMode($0.mode), sha256: $0.sha256.hex)
        })
        try state.set(["ready": id, "staging": nil])
        try? FileSystem.removeTree(install.deltasDirectory)  // only a resume would have used them
    }
}
