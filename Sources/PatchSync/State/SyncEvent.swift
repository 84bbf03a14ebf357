import Foundation
import Synchronization

/// The steps of a sync, as stable ids a user interface can switch on.
public enum SyncPhase: String, Codable, Sendable, CaseIterable {
    /// Refreshing the signed metadata.
    case checking
    /// Planning a build (or one more bundle of it) against the files here.
    case comparing
    /// Patching files with a delta pack.
    case patching
    /// Fetching chunks.
    case fetching
    /// Fetching a build ahead of its release, sealed.
    case preloading
    /// A preloaded build was released: opening it.
    case unlocking
}

/// Progress of a sync as it runs.
public enum SyncEvent: Sendable {
    /// A step of the sync begins: its stable id, and a sentence for a person.
    case phase(SyncPhase, String)
    /// Compressed bytes fetched of the step's total and of the whole update's, and files whose fetched
    /// chunks are all written.
    case transfer(TransferStatus)
    /// Where the build's bundles stand: sent when the sync has planned them and each time a step of
    /// them becomes ready (the required part first: then the build is playable).
    case bundles(BundleProgress)
    /// Where a preload build stands: bytes here of those to preload, its release time, released or not.
    case preload(PreloadStatus)
    /// Requests are in flight and no byte has arrived for `seconds`: the origin froze or the network went
    /// away. Sent when the quiet reaches the sync's `stallAfter`, then every 5 s while it lasts (a heartbeat);
    /// the sync goes on retrying until bytes come or it gives up.
    case stalled(seconds: Int)
    /// A request failed and is tried again: on which mirror, after how long.
    case retrying(RetryStatus)
    /// No mirror can be reached (connections refused, names that do not resolve, no route), as the text
    /// says for each: the sync waits for the origin, retrying, until bytes come (`.online`) or it gives up.
    /// Sent once until then.
    case offline(String)
    /// Bytes arrive again after `.offline`.
    case online
    /// Something costs more than it should (an origin that ignores Range): said once per sync.
    case warning(String)
}

/// Where one transfer stands, as a `.transfer` event says it: the step being downloaded (a deployment
/// of the build with one more bundle), the whole update to the target build with the chosen bundles,
/// and the bundle this step adds. Bytes are bytes fetched (compressed, as the origin stores them); the
/// installed size of the bundle is beside them.
public struct TransferStatus: Codable, Sendable, Equatable {
    /// Bytes fetched of this step's transfer (a delta pack and the chunks after it count on one scale).
    public var done: Int64
    public var total: Int64
    /// Files whose fetched chunks are all written, of those this step fetches.
    public var filesDone: Int
    public var filesTotal: Int
    /// The whole update: bytes fetched of those it takes, stable across bundle steps, pauses and
    /// restarts (a killed sync's total is recorded in the install's state).
    public var updateDone: Int64?
    public var updateTotal: Int64?
    /// The bundles this step downloads (the required ones in the first step, then one optional bundle
    /// each), and their bytes fetched of their total.
    public var bundles: [String]?
    public var bundleDone: Int64?
    public var bundleTotal: Int64?
    /// Those bundles' size once installed.
    public var bundleInstalledBytes: Int64?
    /// Content bytes LAN peers delivered so far in this sync (absent without peers).
    public var peerBytes: Int64?
    /// When the counts were taken (not encoded): a rate measured over events is true even when an event
    /// reaches its consumer a moment later (arrival events go out at the sync's next tick).
    public var countedAt: ContinuousClock.Instant?
    /// The ``TransferProgress`` the status came from (later ones have higher numbers): events are put
    /// in order by it. Not encoded.
    var progress: Int?

    enum CodingKeys: String, CodingKey {
        case done, total, filesDone, filesTotal, updateDone, updateTotal, bundles, bundleDone, bundleTotal
        case bundleInstalledBytes, peerBytes
    }

    public init(done: Int64, total: Int64, filesDone: Int = 0, filesTotal: Int = 0) {
        self.done = done
        self.total = total
        self.filesDone = filesDone
        self.filesTotal = filesTotal
    }
}
