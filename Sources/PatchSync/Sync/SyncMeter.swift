import Foundation
import Synchronization

/// What a sync's network is doing, as bytes arrive rather than as requests complete: the bytes each
/// response delivered, the requests in flight, and when the last byte came. The transfer progress of the
/// step being staged counts arriving bytes through it (so a download page moves with the bytes, not in
/// 16 MiB steps), and the sync's watch asks it whether the origin has stalled.
///
/// Thread-safety: a `Mutex` holds the counters; libcurl's transfer thread adds, the watch reads.
public final class SyncMeter: Sendable {
    private struct State {
        var received: Int64 = 0
        /// Requests in flight plus retries waiting their turn: while any is, the network is wanted.
        var active = 0
        /// When `active` last went from 0 to 1, or the last byte came while active.
        var activeSince = ContinuousClock.now
        /// Time the network was wanted and gave nothing, in earlier active spells since the last byte:
        /// a retry after a backoff, or a request curl cut off for low speed, continues the quiet rather
        /// than starting it again.
        var quietBefore = Duration.zero
        var current: TransferProgress?
        /// The step's progress event that arriving bytes made due, sent by the watch's next tick (never
        /// from the transfer thread: the event's consumers write to disk and pipes).
        var pending: SyncEvent?
        var throttled: (@Sendable () -> Bool)?
        /// Where flushed events go when not straight to `onEvent` (a sync with peers adds their bytes).
        var through: (@Sendable (SyncEvent) -> Void)?
        var stallReported = false
        /// Bytes downloaded and dropped because the origin answered a range request with the whole file.
        var wasted: Int64 = 0
        var rangeWarned = false

        func quiet(_ now: ContinuousClock.Instant) -> Duration {
            quietBefore + (active > 0 ? now - activeSince : .zero)
        }

        mutating func began(_ now: ContinuousClock.Instant) {
            if active == 0 { activeSince = now }
            active += 1
        }

        mutating func ended(_ now: ContinuousClock.Instant) {
            active -= 1
            if active == 0 { quietBefore += now - activeSince }
        }

        mutating func heard(_ now: ContinuousClock.Instant) {
            quietBefore = .zero
            activeSince = now
            stallReported = false
        }
    }

    private let state = Mutex(State())
    /// Where events of the step's progress go.
    let onEvent: @Sendable (SyncEvent) -> Void

    init(onEvent: @escaping @Sendable (SyncEvent) -> Void) {
        self.onEvent = onEvent
    }

    /// Every byte the responses delivered so far (metadata, manifests and content).
    public var received: Int64 { state.withLock { $0.received } }

    /// Whether the transfers wait for the cap's tokens now (set by the sync's HTTP client): quiet then is
    /// the cap's doing, whatever the cap is at the moment, so the stall clock starts again.
    func throttled(by check: @escaping @Sendable () -> Bool) { state.withLock { $0.throttled = check } }

    /// The progress of the step being fetched now: arriving bytes count toward it.
    func follow(_ progress: TransferProgress?) {
        state.withLock {
            $0.current = progress
            $0.pending = nil
        }
    }

    /// A progress event from the transfer thread (a delta pack's or a preload's bytes as they are
    /// written): sent by the watch's next tick, not from there.
    func post(_ event: SyncEvent) { state.withLock { $0.pending = event } }

    /// Flushed events go through `sink` (which ends at `onEvent`) from now on.
    func send(through sink: @escaping @Sendable (SyncEvent) -> Void) { state.withLock { $0.through = sink } }

    /// Sends the progress event that arriving bytes made due, if any (the watch's tick calls it).
    func flush() {
        let (event, through) = state.withLock { state -> (SyncEvent?, (@Sendable (SyncEvent) -> Void)?) in
            defer { state.pending = nil }
            return (state.pending, state.through)
        }
        if let event { (through ?? onEvent)(event) }
    }

    func requestBegan(now: ContinuousClock.Instant = .now) { state.withLock { $0.began(now) } }

    func requestEnded(now: ContinuousClock.Instant = .now) { state.withLock { $0.ended(now) } }

    /// A retry waits out its backoff: the network is wanted all that time (a network that refuses every
    /// connection is as stalled as one that accepts and sends nothing).
    func backingOff(_ wait: Duration) async throws(PatchSyncError) {
        requestBegan()
        defer { requestEnded() }
        do { try await Task.sleep(for: wait) } catch { throw PatchSyncError.cancelled }
    }

    /// Body bytes arrived that are no progress (what precedes a range in a whole-file answer): the
    /// origin is not stalled.
    func heard(now: ContinuousClock.Instant = .now) { state.withLock { $0.heard(now) } }

    /// The origin answered a range request of `url` with the whole file: `wasted` bytes before the range
    /// came and were dropped. Said once per sync, as a `.warning`.
    func rangeIgnored(_ url: String, wasted: Int64) {
        let first = state.withLock { state -> Bool in
            state.wasted += wasted
            defer { state.rangeWarned = true }
            return !state.rangeWarned
        }
        guard first else { return }
        let host = URL(string: url)?.host ?? url
        onEvent(
            .warning(
                "\(host) ignores HTTP Range requests (it answered a range of \(url) with the whole file): every chunk "
                    + "costs the bytes of its object before it (\(ByteCount.format(wasted)) for this one; the result's "
                    + "bytesWasted gives the total); configure the server or CDN to honour Range"))
    }

    /// Bytes dropped so far because the origin ignored Range.
    var wasted: Int64 { state.withLock { $0.wasted } }

    /// `count` bytes of a response arrived (on the transfer thread).
    func arrived(_ count: Int) {
        state.withLock { state in
            state.received += Int64(count)
            state.heard(.now)
            if let event = state.current?.received(Int64(count)) { state.pending = event }
        }
    }

    /// How long the network has been wanted (requests in flight, retries waiting) with no byte arriving,
    /// since the last byte (nil: not wanted now, or bytes came within the last second).
    func stalled(now: ContinuousClock.Instant = .now) -> Duration? {
        let throttled = state.withLock { $0.throttled }?() ?? false
        return state.withLock { state in
            if throttled { state.heard(now) }
            guard state.active > 0 else { return nil }
            let quiet = state.quiet(now)
            return quiet >= .seconds(1) ? quiet : nil
        }
    }

    /// True once per stall, the first time it is asked after `after` with no byte.
    func reportStall(after: Duration, now: ContinuousClock.Instant = .now) -> Duration? {
        let throttled = state.withLock { $0.throttled }?() ?? false
        return state.withLock { state in
            if throttled { state.heard(now) }
            guard state.active > 0, !state.stallReported else { return nil }
            let quiet = state.quiet(now)
            guard quiet >= after else { return nil }
            state.stallReported = true
            return quiet
        }
    }
}

/// A response sink that counts what arrives in the sync's meter before handing it on.
final class MeteredSink: ResponseSink, @unchecked Sendable {
    private let inner: any ResponseSink
    private let meter: SyncMeter

    init(_ inner: any ResponseSink, meter: SyncMeter) {
        self.inner = inner
        self.meter = meter
    }

    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError? {
        meter.arrived(bytes.count)
        return inner.receive(bytes)
    }

    func dropped(_ count: Int) { meter.heard() }
}
