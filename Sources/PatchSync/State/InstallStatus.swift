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
    /// The build whose folder the staged build was started in (its unchanged files kept, the rest
    /// brought forward): it is no rollback target any more, though it was the one before `current`.
    public var recycling: String?
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

/// Where a build's bundles stand in an install, for launchers ("playable now, French voices in 4 min").
public struct BundleProgress: Codable, Sendable, Equatable {
    /// One bundle of the build.
    public struct Entry: Codable, Sendable, Equatable {
        public enum State: String, Codable, Sendable {
            /// In the live tree.
            case live
            /// Staged whole: goes live at the next start.
            case ready
            /// Wanted, not complete yet (downloading, or waiting for its turn).
            case pending
            /// An optional bundle the player did not choose.
            case notSelected
        }

        public var name: String
        public var required: Bool
        /// Whether the player's selection includes it (required ones always do).
        public var selected: Bool
        public var state: State
        /// The size of its files.
        public var bytes: Int64
        /// Of a pending bundle being staged: bytes of its files written so far.
        public var bytesDone: Int64?
    }

    public var buildId: String
    /// Every required bundle of the build is live or ready: the game can start on it.
    public var playable: Bool
    public var bundles: [Entry]
    /// Bundles the player chose that this build does not have.
    public var dropped: [String]

    /// The names of bundles in `state`.
    public func names(_ state: Entry.State) -> [String] { bundles.filter { $0.state == state }.map(\.name) }
}
