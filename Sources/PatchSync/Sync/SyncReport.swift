import Foundation

/// What a sync did, for people and for `--json`.
public struct SyncReport: Codable, Sendable {
    public enum Outcome: String, Codable, Sendable {
        /// A new build is staged and ready for the next apply.
        case ready
        /// The install already runs the newest build.
        case upToDate
        /// The newest build was already staged and ready.
        case alreadyReady
        /// The newest build is the one rolled back from: it is not installed again.
        case heldBack
        /// The newest build is a preload: its sealed content is here, and it unlocks when signed metadata
        /// releases it (``SyncReport/preload``).
        case preloaded
    }

    public var outcome: Outcome
    public var buildId: String
    public var sequence: Int
    /// Set when the publisher put this build back on the channel: the build it replaced, and why.
    public var rollback: RollbackNote?
    /// The size of the build's files.
    public var buildBytes: Int64 = 0
    public var filesLinked = 0
    public var filesAssembled = 0
    public var chunksCopiedLocally = 0
    public var chunksFetched = 0
    /// Files rebuilt from the live build's files with the publisher's deltas.
    public var filesPatched = 0
    /// Files the delta path was planned for that went by chunks instead (a refused delta or pack).
    public var deltaFallbacks = 0
    /// Bytes of the delta pack fetched by this run.
    public var deltaBytes: Int64 = 0
    /// The compressed size of the chunks that had to be fetched, as the manifest states it.
    public var bytesPlanned: Int64 = 0
    /// Body bytes received from the origin by this run (metadata, manifest and objects).
    public var bytesReceived: Int64 = 0
    public var requests = 0
    /// Where the build's bytes came from, counted as installed (content) bytes: chunks from LAN peers,
    /// chunks from the origin, chunks a preload fetched ahead (opened from the preload store), and what
    /// files already here gave (links, local copies, delta patches).
    public var bytesFromPeers: Int64 = 0
    public var bytesFromOrigin: Int64 = 0
    public var bytesFromPreload: Int64 = 0
    public var bytesFromLocal: Int64 = 0
    /// What each LAN peer delivered, and why one was dropped (absent without peers).
    public var peers: [Peers.Standing]?
    /// Bytes downloaded and dropped because the origin ignored Range requests (nil: none).
    public var bytesWasted: Int64?
    /// The bundles this sync set out to install, in download order.
    public var bundles: [String] = []
    /// Bundles the player chose that the build does not have (nothing to install for them).
    public var droppedBundles: [String] = []
    /// Deployments staged by this run: the required part first, then one more optional bundle each.
    public var deploymentsStaged = 0
    /// Set when the newest build is a preload: how much of it is here, and when it unlocks.
    public var preload: PreloadStatus?

    /// Adds the work of one more staged deployment of the same build: the files it assembled and the
    /// transfers it made; its size and links are the newest step's (each holds the steps before it).
    mutating func add(_ step: SyncReport) {
        buildBytes = step.buildBytes
        filesAssembled += step.filesAssembled
        filesLinked = step.filesLinked + step.filesAssembled - filesAssembled
        chunksCopiedLocally += step.chunksCopiedLocally
        chunksFetched += step.chunksFetched
        filesPatched += step.filesPatched
        deltaFallbacks += step.deltaFallbacks
        deltaBytes += step.deltaBytes
        bytesPlanned += step.bytesPlanned
        bytesFromOrigin += step.bytesFromOrigin
        bytesFromPeers += step.bytesFromPeers
        bytesFromPreload += step.bytesFromPreload
        requests += step.requests
        deploymentsStaged += 1
    }
}

extension SyncStep {
    var outcome: SyncReport.Outcome {
        switch self {
        case .upToDate: return .upToDate
        case .alreadyReady: return .alreadyReady
        case .heldBack: return .heldBack
        case .stage: return .ready
        }
    }
}
