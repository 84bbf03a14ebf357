import Foundation

/// What an install holds: for `patchsync status` and launchers.
public struct InstallStatus: Codable, Sendable {
    /// Progress of a build being staged.
    public struct Staging: Codable, Sendable {
        public var buildId: String
        public var chunksDone: Int
        public var chunksTotal: Int
        public var bytesDone: Int64
        public var bytesTotal: Int64
    }

    /// A kept build folder and the disk it uses that no folder listed before it shares (hard links count once).
    public struct BuildDisk: Codable, Sendable {
        /// The folder in `builds/` (`<build id>`, or `<build id>@<n>` when a build came back).
        public var name: String
        /// The build it holds.
        public var buildId: String?
        /// Only when asked for (`status(diskUsage: true)`, `status --disk`): it walks every file.
        public var diskBytes: Int64?
    }

    /// How the files of the staged or ready build came (or come): linked, rebuilt by delta, from chunks.
    public struct Routes: Codable, Sendable, Equatable {
        public var buildId: String
        public var linked: Int
        public var delta: Int
        public var chunks: Int
    }

    public var install: String
    public var channel: String
    public var remotes: [String]
    public var current: String?
    public var previous: String?
    /// A staged, complete build waiting for the next apply.
    public var ready: String?
    public var staging: Staging?
    /// The highest sequence seen on the channel (rollback protection).
    public var seenSequence: Int?
    /// A build rolled back from, which sync does not install again.
    public var heldBack: String?
    /// Builds in builds/, oldest applied first, with their disk use.
    public var builds: [BuildDisk]
    /// Disk used by staging (only when asked for, as `diskBytes`).
    public var stagingDiskBytes: Int64?
    /// A sync running now (in this or another process), with its rate and ETA.
    public var running: RunningSync?
    /// The last discretionary run was deferred: why, and when the next may try.
    public var deferral: Deferral?
    /// Per route, the files of the build being staged or ready.
    public var routes: Routes?
    /// Why the current or the ready build is an earlier one: the publisher rolled the channel back.
    public var currentRollback: RollbackNote?
    public var readyRollback: RollbackNote?
    /// The bundles of the newest build this install knows: live, ready, pending or not selected, with their sizes.
    public var bundles: BundleProgress?
    /// What the live tree holds besides its files.
    public var liveLinks: Int?
    public var liveEmptyFolders: Int?
    /// A preload build fetched ahead of its release: how much is here, and when it unlocks.
    public var preload: PreloadStatus?
}

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
                name: $0, buildId: String($0.prefix { $0 != "@" }), diskBytes: diskUsage ? DiskUsage.of(buildDirectory($0), &inodes) : nil)
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
        if let staging = state.staging, let manifest = try? Syncer(install: self).loadManifest(staging.name) {
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
        } else if let current = status.current, let manifest = try? Syncer(install: self).loadManifest(current) {
            (status.liveLinks, status.liveEmptyFolders) = (manifest.links?.count ?? 0, manifest.folders?.count ?? 0)
        }
        status.currentRollback = state.currentIdentity?.rollback
        status.readyRollback = state.ready?.rollback
        // The state names the deployment by its folder; a status names builds by their ids.
        if var routes = state.routes, let owner = [state.staging, state.ready].compactMap({ $0 }).first(where: { $0.name == routes.buildId }) {
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
