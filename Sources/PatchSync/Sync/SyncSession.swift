import Foundation

/// A sync started from Swift: its progress as an `AsyncSequence` of events, its
/// result, and a way to cancel it (transfers stop within about a second; every
/// chunk already verified is kept for the next run).
///
/// ```swift
/// let install = try Install.open(at: gameFolder)
/// let session = install.startSync()
/// for await event in session.events { show(event) }
/// let report = try await session.result()
/// ```
public final class SyncSession: Sendable {
    /// Progress events; the sequence ends when the sync ends.
    public let events: AsyncStream<SyncEvent>
    private let task: Task<SyncReport, any Error>

    init(syncer: Syncer) {
        let (stream, continuation) = AsyncStream.makeStream(of: SyncEvent.self, bufferingPolicy: .bufferingNewest(256))
        events = stream
        task = Task {
            defer { continuation.finish() }
            return try await syncer.run { continuation.yield($0) }
        }
    }

    /// Stops the sync: it ends with a deferred error, progress kept.
    public func cancel() { task.cancel() }

    /// Waits for the sync to end and returns what it did.
    public func result() async throws(PatchSyncError) -> SyncReport {
        do { return try await task.value } catch { throw PatchSyncError.wrap(error) }
    }
}

extension Install {
    /// Starts a sync of this install in the background.
    public func startSync(now: Date = Date()) -> SyncSession {
        SyncSession(syncer: Syncer(install: self, now: now))
    }
}
