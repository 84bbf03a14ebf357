import Foundation

/// This build of PatchSync: `patchsync --version` and the User-Agent of every request.
public enum PatchSyncVersion {
    public static let current = "0.3.0"
    static var userAgent: String { "PatchSync/\(current)" }
}
