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
    public var builds: [String]
}

extension Install {
    /// Reads the install's status without taking its lock, so it works while a sync runs.
    public func status() throws(PatchSyncError) -> InstallStatus {
        let config = try config()
        let state = try state(readOnly: true)
        var status = InstallStatus(install: root, channel: config.channel, remotes: config.remotes,
                                   current: currentBuild(), previous: try state.setting("previous"),
                                   ready: try state.setting("ready"), staging: nil,
                                   seenSequence: (try state.setting("seenSequence.\(config.channel)")).flatMap { Int($0) },
                                   builds: (try? FileSystem.list(buildsDirectory)) ?? [])
        if let staging = try state.setting("staging"),
           let data = try? FileSystem.read(manifestPath(staging), limit: 256 << 20),
           let manifest = try? Manifest.decode(data, what: manifestPath(staging)) {
            let done = try state.doneChunks(build: staging)
            var progress = InstallStatus.Staging(buildId: staging, chunksDone: 0, chunksTotal: 0, bytesDone: 0,
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
        return status
    }
}
