import Foundation
import Logging

extension Origin {
    private static let trustLogger = Logger(label: "patchsync.origin")

    /// Runs the TUF refresh (``TrustClient/refresh()``) with each mirror asked first in turn: a mirror
    /// that serves metadata the refresh refuses (an older timestamp, a bad signature) or cannot serve it
    /// is passed over for the next one instead of failing the refresh. Safe because the client persists
    /// only files it verified. When every turn fails, throws the first refusal (65) if there was one,
    /// else the first failure. `deadline` bounds all turns together.
    func refreshTrust(directory: String, now: Date, deadline: Date?) async throws(PatchSyncError) -> TrustedMetadata {
        var first: PatchSyncError?
        var refusal: PatchSyncError?
        for mirror in mirrors.indices {
            let client = TrustClient(directory: directory, source: preferring(mirror), now: now, deadline: deadline)
            do {
                return try await client.refresh()
            } catch  where error.code == .refusedData || error.code == .originUnavailable {
                Self.trustLogger.notice("metadata refresh with \(mirrors[mirror]) first failed: \(error)")
                first = first ?? error
                if error.code == .refusedData { refusal = refusal ?? error }
                if let deadline, Date() >= deadline { break }
            }
        }
        throw refusal ?? first ?? PatchSyncError(.internal, "a metadata refresh ran on no mirror")
    }

    /// The deadline of a metadata refresh that starts now, `seconds` away (``InstallConfig/refreshDeadline``):
    /// a trickle fast enough for the low-speed limit is still ended (slow retrieval). Inside a sync (the
    /// client has a meter) it is never sooner than `giveUp`, the quiet the sync waits for: an origin that
    /// refuses connections is the sync's stall to end, with its own words, not the refresh's. Nil when the
    /// sync never gives up.
    func refreshDeadline(seconds: TimeInterval, giveUp: Duration? = nil) -> Date? {
        guard client.meter != nil else { return Date() + seconds }
        guard let giveUp else { return nil }
        return Date() + max(seconds, Double(giveUp.components.seconds) + 10)
    }

    /// The origin's metadata with mirror `index` asked first (unless it is cooling down), then the
    /// others as the retry policy decides.
    func preferring(_ index: Int) -> some MetadataSource { PreferredMirror(origin: self, index: index) }
}

/// The origin's `metadata/` folder asked on one mirror first: one turn of ``Origin/refreshTrust(directory:now:deadline:)``.
private struct PreferredMirror: MetadataSource {
    let origin: Origin
    let index: Int

    func metadata(_ name: String, maxBytes: Int64, timeout: TimeInterval?) async throws(PatchSyncError) -> Data? {
        try await origin.whole(
            OriginLayout.metadata(name), maxBytes: maxBytes, timeout: timeout, escaped: true, preferring: index)
    }
}
