import Foundation
import Logging
import Synchronization

/// A preload build on an install: what it is, how much of it is here, and whether it is released.
public struct PreloadStatus: Codable, Sendable, Equatable {
    public var buildId: String
    public var channel: String
    /// When the publisher plans to release it. It unlocks when signed metadata releases its key, not by
    /// this machine's clock.
    public var releaseAt: Date
    /// Bytes to preload for the install's bundles, and those here.
    public var bytes: Int64
    public var bytesDone: Int64
    /// True once signed metadata released the build's content key.
    public var released: Bool

    /// "preloaded 1.6 GiB of 1.6 GiB, unlocks 2026-12-01 17:00 UTC".
    public var summary: String {
        let what = "preloaded \(ByteCount.format(bytesDone)) of \(ByteCount.format(bytes)) of build \(buildId)"
        return released ? what + ", released" : what + ", unlocks \(Repository.day(releaseAt))"
    }

}
