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
        var inFlight = 0
        /// The last time a byte arrived, or a request started while none was in flight.
        var lastProgress = ContinuousClock.now
        var current: TransferProgress?
        var stallReported = false
        /// Bytes downloaded and dropped because the origin answered a range request with the whole file.
        var wasted: Int64 = 0
        var rangeWarned = false
    }

    private let state = Mutex(State())
    /// Where events of the step's progress go.
    let onEvent: @Sendable (SyncEvent) -> Void

    init(onEvent: @escaping @Sendable (SyncEvent) -> Void) {
        self.onEvent = onEvent
    }

    /// Every byte the responses delivered so far (metadata, manifests and content).
    public var received: Int64 { state.withLock { $0.received } }

    /// The progress of the step being fetched now: arriving bytes count toward it.
    func follow(_ progress: TransferProgress?) { state.withLock { $0.current = progress } }

    func requestBegan() {
        state.withLock { state in
            if state.inFlight == 0 { state.lastProgress = .now }
            state.inFlight += 1
        }
    }

    func requestEnded() { state.withLock { $0.inFlight -= 1 } }

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
        let event = state.withLock { state -> SyncEvent? in
            state.received += Int64(count)
            state.lastProgress = .now
            state.stallReported = false
            return state.current?.received(Int64(count))
        }
        if let event { onEvent(event) }
    }

    /// How long requests have been in flight with no byte arriving (nil: none in flight, or bytes came
    /// within the last second).
    func stalled(now: ContinuousClock.Instant = .now) -> Duration? {
        state.withLock { state in
            guard state.inFlight > 0 else { return nil }
            let quiet = now - state.lastProgress
            return quiet >= .seconds(1) ? quiet : nil
        }
    }

    /// True once per stall, the first time it is asked after `after` with no byte.
    func reportStall(after: Duration, now: ContinuousClock.Instant = .now) -> Duration? {
        state.withLock { state in
            guard state.inFlight > 0, !state.stallReported else { return nil }
            let quiet = now - state.lastProgress
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
}
