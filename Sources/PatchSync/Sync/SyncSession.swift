import Foundation

/// A sync started from Swift: its progress as an `AsyncSequence` of events, its
/// result, a way to cancel it (transfers stop within about a second; every
/// chunk already verified is kept for the next run), and its bandwidth cap, which
/// may change while it runs.
///
/// ```swift
/// let install = try Install.open(at: gameFolder)
/// var options = SyncOptions()
/// options.maxBytesPerSecond = 4 << 20
/// let session = install.startSync(options)
/// for await event in session.events { show(event) }
/// let report = try await session.result()
/// ```
public final class SyncSession: Sendable {
    /// Progress events; the sequence ends when the sync ends.
    public let events: AsyncStream<SyncEvent>
    /// The same events with the time each happened: for a session on a sync that runs in another process
    /// (``Install/attach()``), the first ones are a snapshot of where it stands (the latest of each kind)
    /// at the times the sync recorded them. Read this or ``events``, not both.
    public let timedEvents: AsyncStream<TimedSyncEvent>
    private let task: Task<SyncReport, any Error>
    private let control: SyncControl?

    init(syncer: Syncer) {
        var syncer = syncer
        let control = syncer.control ?? SyncControl()
        syncer.control = control
        self.control = control
        let (stream, continuation) = AsyncStream.makeStream(of: SyncEvent.self, bufferingPolicy: .bufferingNewest(256))
        let (timed, timedContinuation) = AsyncStream.makeStream(
            of: TimedSyncEvent.self, bufferingPolicy: .bufferingNewest(256))
        events = stream
        timedEvents = timed
        task = Task { [syncer] in
            defer {
                continuation.finish()
                timedContinuation.finish()
            }
            return try await syncer.run {
                continuation.yield($0)
                timedContinuation.yield(TimedSyncEvent(event: $0, time: Date()))
            }
        }
    }

    /// A session on work that `body` does, sending its events (``Install/attach()``).
    init(
        _ body:
            @escaping @Sendable (@escaping @Sendable (SyncEvent, Date?) -> Void) async throws(PatchSyncError) ->
            SyncReport
    ) {
        control = nil
        let (stream, continuation) = AsyncStream.makeStream(of: SyncEvent.self, bufferingPolicy: .bufferingNewest(256))
        let (timed, timedContinuation) = AsyncStream.makeStream(
            of: TimedSyncEvent.self, bufferingPolicy: .bufferingNewest(256))
        events = stream
        timedEvents = timed
        task = Task {
            defer {
                continuation.finish()
                timedContinuation.finish()
            }
            return try await body { event, time in
                continuation.yield(event)
                timedContinuation.yield(TimedSyncEvent(event: event, time: time ?? Date()))
            }
        }
    }

    /// Stops the sync: it ends deferred (``PatchSyncError/Reason/playerPaused``), progress kept. On an
    /// attached session, stops following; the sync goes on.
    public func cancel() { task.cancel() }

    /// A new bandwidth cap for the transfers running and to come (nil: none), over the configured one.
    /// No effect on an attached session (change the configuration: ``Install/updateConfig(_:)``).
    public func setMaxBytesPerSecond(_ bytesPerSecond: Int?) { control?.setMaxBytesPerSecond(bytesPerSecond) }

    /// Waits for the sync to end and returns what it did.
    public func result() async throws(PatchSyncError) -> SyncReport {
        do { return try await task.value } catch { throw PatchSyncError.wrap(error) }
    }
}

/// A sync event and when it happened.
public struct TimedSyncEvent: Sendable {
    public var event: SyncEvent
    public var time: Date
}

extension Install {
    /// Starts a sync of this install in the background, as `options` say.
    public func startSync(_ options: SyncOptions = SyncOptions(), now: Date = Date()) -> SyncSession {
        SyncSession(syncer: Syncer(install: self, options: options, now: now))
    }
}
