import Foundation
import Synchronization

/// A sync as it runs, for `status` in another process: the running sync writes it to state.db
/// about once a second and removes it when it ends.
public struct RunningSync: Codable, Sendable, Equatable {
    public var pid: Int32
    /// When its process started (``ProcessIdentity``): a later process given the same pid is not it.
    public var processStart: UInt64?
    public var startedAt: Date
    public var updatedAt: Date
    /// Compressed bytes fetched of those the whole update needs (of the step's, when no update total is known).
    public var bytesDone: Int64
    public var bytesTotal: Int64
    /// Over the last few seconds.
    public var bytesPerSecond: Int64
    /// Seconds left at that rate; nil before any rate is known.
    public var etaSeconds: Int64?
    /// Set while requests wait with no byte arriving (the rate is then 0).
    public var stalled: Bool?
    /// A background (`--discretionary`) sync: a foreground one takes over from it.
    public var discretionary: Bool?
    /// The step downloading now (one more bundle each), and its bundles (see ``TransferStatus``).
    public var stepBytesDone: Int64?
    public var stepBytesTotal: Int64?
    public var bundles: [String]?
    public var bundleBytesDone: Int64?
    public var bundleBytesTotal: Int64?

    /// The recorded sync, if its process still runs (a killed one leaves its record behind).
    static func alive(_ running: RunningSync?, now: Date = Date()) -> RunningSync? {
        guard var running, ProcessIdentity(pid: running.pid, startTicks: running.processStart).isRunning else {
            return nil
        }
        // A record not written for a few seconds is a sync whose bytes stopped: no rate to trust.
        if now.timeIntervalSince(running.updatedAt) > 3 {
            running.bytesPerSecond = 0
            running.etaSeconds = nil
        }
        return running
    }

}
