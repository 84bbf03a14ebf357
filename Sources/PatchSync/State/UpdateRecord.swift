import Foundation
import Synchronization

/// The totals an update started with, kept in the install's state so a restarted sync counts on the
/// same scale: the manifest and bundles it installs, its bytes to fetch, and each step's.
public struct UpdateRecord: Codable, Sendable, Equatable {
    public var manifest: String
    public var bundles: [String]
    public var totalBytes: Int64
    /// Per step, keyed by the bundles it adds (comma-joined): bytes to fetch.
    public var stepBytes: [String: Int64]
}
