import Foundation

extension Install {
    /// Reads the install's status without taking its lock, so it works while a sync runs. It reads the
    /// install state, not the manifests (but for the progress of a build being staged), so it takes
    /// the same time at a million files as at ten. `diskUsage` adds each build folder's disk use, which
    /// walks every file.
    public func status(diskUsage: Bool = false) throws(PatchSyncError) -> InstallStatus {
        let config = try config()
        let store = try state(readOnly: true)
        let state = try store.read()
        let history = state.history
        let folders = ((try? FileSystem.list(buildsDirectory)) ?? []).sorted {
            (history.firstIndex(of: $0) ?? -1, $0) < (history.firstIndex(of: $1) ?? -1, $1)
        }
        var inodes = Set<UInt64>()
        let builds = folders.map {
            InstallStatus.BuildDisk(
                name: $0, buildId: String($0.prefix { $0 != "@" }),
                diskBytes: diskUsage ? DiskUsage.of(buildDirectory($0), &inodes) : nil)
        }
        let stagingBytes = diskUsage ? DiskUsage.of(stagingDirectory, &inodes) : nil
        var status = InstallStatus(
            install: root, channel: config.channel, remotes: config.remotes,
            current: buildId(of: currentDeployment(), state), previous: buildId(of: previousDeployment(state), state),
            ready: state.ready?.buildId, staging: nil,
            seenSequence: state.seenSequence[config.channel],
            heldBack: state.heldBack, builds: builds,
            stagingDiskBytes: stagingBytes, running: RunningSync.alive(state.running),
            deferral: state.deferral)
        if let staging = state.staging, let manifest = try? self.manifest(of: staging.name) {
            let done = try StagedBuild(staging, in: self, state: store).recorded(manifest)
            var progress = InstallStatus.Staging(
                buildId: staging.buildId, chunksDone: 0, chunksTotal: 0, bytesDone: 0,
                bytesTotal: manifest.totalSize)
            for file in manifest.files {
                for (index, chunk) in file.chunks.enumerated() {
                    progress.chunksTotal += 1
                    if done.contains(.init(path: file.path, index: index)) {
                        progress.chunksDone += 1
                        progress.bytesDone += Int64(chunk.length)
                    }
                }
            }
            status.staging = progress
        }
        status.bundles = try? bundleProgress()
        status.preload = state.preload
        if let summary = state.currentIdentity?.summary {
            (status.liveLinks, status.liveEmptyFolders) = (summary.links, summary.folders)
        } else if let current = status.current, let manifest = try? self.manifest(of: current) {
            (status.liveLinks, status.liveEmptyFolders) = (manifest.links?.count ?? 0, manifest.folders?.count ?? 0)
        }
        status.recycling = state.recycling.map { Deployment.buildID(of: $0) }
        status.currentRollback = state.currentIdentity?.rollback
        status.readyRollback = state.ready?.rollback
        // The state names the deployment by its folder; a status names builds by their ids.
        if var routes = state.routes,
            let owner = [state.staging, state.ready].compactMap({ $0 }).first(where: { $0.name == routes.buildId })
        {
            routes.buildId = owner.buildId
            status.routes = routes
        }
        return status
    }
}

/// Disk use of a tree: allocated blocks of each inode not counted before.
enum DiskUsage {
    static func of(_ path: String, _ seen: inout Set<UInt64>) -> Int64 {
        guard let st = try? FileSystem.status(path) else { return 0 }
        var total: Int64 = 0
        if seen.insert(UInt64(st.st_ino)).inserted { total += Int64(st.st_blocks) * 512 }
        if (st.st_mode & S_IFMT) == S_IFDIR {
            for name in (try? FileSystem.list(path)) ?? [] { total += of(path + "/" + name, &seen) }
        }
        return total
    }
}

extension Install {
    /// The folders the state records (names under `builds/` and `.patchsync/staging/`, which may carry a
    /// suffix, `1.2@2`): for tools that check the install's records against its disk. ``status()``
    /// gives build ids.
    public func recordedFolders() throws(PatchSyncError) -> (current: String?, ready: String?) {
        let state = try state(readOnly: true).read()
        return (state.current, state.ready?.name)
    }
}
