import Foundation
import Synchronization

/// What a sync's network is doing, as bytes arrive rather than as requests complete: the bytes each
/// response delivered, the requests in flight, and when the last byte came. The transfer progress of the
/// step being staged counts arriving bytes through it (so a download page moves with the bytes, not in
/// 16 MiB steps), and the sync's watch asks it each tick what is due (``tick(stallAfter:giveUpAfter:asleep:now:)``):
/// the decisions are ``NetworkQuiet``'s.
///
/// Thread-safety: a `Mutex` holds the counters; libcurl's transfer thread adds, the watch reads.
public final class SyncMeter: ByteMeter {
    private struct State {
        var received: Int64 = 0
        var quiet: NetworkQuiet
        var current: TransferProgress?
        /// The step's progress event that arriving bytes made due, sent by the watch's next tick (never
        /// from the transfer thread: the event's consumers write to disk and pipes).
        var pending: SyncEvent?
        var throttled: (@Sendable () -> Bool)?
        /// Where flushed events go when not straight to `onEvent` (a sync with peers adds their bytes).
        var through: (@Sendable (SyncEvent) -> Void)?
        /// What the mirrors last did when none could be reached (the `.offline` event's words).
        var unreachable: String?
        /// Bytes downloaded and dropped because the origin answered a range request with the whole file.
        var wasted: Int64 = 0
        var rangeWarned = false
    }

    private let state = Mutex(State(quiet: NetworkQuiet(now: .now)))
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

    /// Sends the progress event that arriving bytes made due, if any; else, while bytes have stopped and
    /// no stall was told yet, the step's status as it stands once a second (a heartbeat: the reader sees
    /// the sync live and its rate fall). The watch's tick calls it.
    func flush(now: ContinuousClock.Instant = .now) {
        let (event, through) = state.withLock { state -> (SyncEvent?, (@Sendable (SyncEvent) -> Void)?) in
            defer { state.pending = nil }
            if let pending = state.pending { return (pending, state.through) }
            return (state.quiet.stallTold ? nil : state.current?.heartbeat(now: now), state.through)
        }
        if let event { (through ?? onEvent)(event) }
    }

    func requestBegan(now: ContinuousClock.Instant = .now) { state.withLock { $0.quiet.began(now) } }

    func requestEnded(now: ContinuousClock.Instant = .now) { state.withLock { $0.quiet.ended(now) } }

    /// A retry waits out its backoff: the network is wanted all that time (a network that refuses every
    /// connection is as stalled as one that accepts and sends nothing).
    func backingOff(_ wait: Duration) async throws(PatchSyncError) {
        requestBegan()
        defer { requestEnded() }
        do { try await Task.sleep(for: wait) } catch { throw PatchSyncError.cancelled }
    }

    /// Body bytes arrived that are no progress (what precedes a range in a whole-file answer): the
    /// origin is not stalled.
    func heard(now: ContinuousClock.Instant = .now) { state.withLock { $0.quiet.heard(now) } }

    /// No mirror could be reached at its last try (`failures` says what each did): sends `.offline` when
    /// the sync was not offline already; the requests go on retrying.
    func retrying(_ status: RetryStatus) { onEvent(.retrying(status)) }

    func offline(_ failures: String) {
        let first = state.withLock { state -> Bool in
            state.unreachable = failures
            return state.quiet.wentOffline()
        }
        if first { onEvent(.offline(failures)) }
    }

    /// What the mirrors last did while none could be reached, if the sync is offline now.
    var unreachable: String? { state.withLock { $0.quiet.isOffline ? $0.unreachable : nil } }

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
    func arrived(_ count: Int, now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            state.received += Int64(count)
            state.quiet.heard(now)
            if let event = state.current?.received(Int64(count)) { state.pending = event }
        }
    }

    /// How long the network has been wanted (requests in flight, retries waiting) with no byte arriving,
    /// since the last byte (nil: not wanted now, or bytes came within the last second).
    func stalled(now: ContinuousClock.Instant = .now) -> Duration? {
        let throttled = state.withLock { $0.throttled }?() ?? false
        return state.withLock { state in
            if throttled { state.quiet.restart(now) }
            return state.quiet.stalled(now)
        }
    }

    /// The quiet, once per stall: the first time it is asked after `after` with no byte.
    func reportStall(after: Duration, now: ContinuousClock.Instant = .now) -> Duration? {
        let throttled = state.withLock { $0.throttled }?() ?? false
        return state.withLock { state in
            if throttled { state.quiet.restart(now) }
            return state.quiet.reportStall(after: after, now: now)
        }
    }

    /// The watch's tick: sends `.online` when bytes came after `.offline`, the progress event that is due
    /// (``flush(now:)``), and `.stalled` as ``NetworkQuiet/check(now:asleep:stallAfter:giveUpAfter:)``
    /// decides; returns the quiet when it reached `giveUpAfter` (the sync gives up). `asleep`: when the
    /// watch slept before this tick.
    func tick(
        stallAfter: Duration, giveUpAfter: Duration?, asleep: Range<ContinuousClock.Instant>? = nil,
        now: ContinuousClock.Instant = .now
    ) -> Duration? {
        let throttled = state.withLock { $0.throttled }?() ?? false
        let due = state.withLock { state in
            if throttled { state.quiet.restart(now) }
            return state.quiet.check(now: now, asleep: asleep, stallAfter: stallAfter, giveUpAfter: giveUpAfter)
        }
        if due.online { onEvent(.online) }
        flush(now: now)
        if let quiet = due.stalled { onEvent(.stalled(seconds: Int(quiet.components.seconds))) }
        return due.giveUp
    }
}

/// When a sync's network is quiet, stalled or offline, and when the sync gives up: a value type driven
/// with the time passed in, so tests step it without sleeping. ``SyncMeter`` keeps one under its lock.
///
/// The quiet is the time the network was wanted (requests in flight, retries waiting their turn) with
/// no byte arriving, counted from the last byte, never from the start of the sync: a healthy sync that
/// runs for hours is never quiet for long. A retry after a backoff, or a request libcurl cut off,
/// continues the quiet rather than starting it again; time with nothing asked of the network (local
/// work between steps) is no quiet. A process that did not run for a while (frozen by SIGSTOP, a machine
/// suspended) starts the quiet again when it wakes: the network had no chance to deliver meanwhile. Only
/// the watch's sleep tells a frozen process: a tick whose own work takes long (`nmcli` hanging through a
/// Wi-Fi handover, events written to a blocked pipe) ran, and its time is quiet like any other.
struct NetworkQuiet: Sendable {
    /// After this long with no byte, a `.stalled` event says so (``SyncOptions/stallAfter``).
    static let stallAfter: Duration = .seconds(10)
    /// While stalled, another `.stalled` event this often: a heartbeat for the reader.
    static let heartbeat: Duration = .seconds(5)
    /// The watch sleeps a tenth of a second between checks: a sleep this long means the process did not run.
    static let frozen: Duration = .seconds(5)

    /// Requests in flight plus retries waiting their turn: while any is, the network is wanted.
    private(set) var active = 0
    /// When `active` last went from 0 to 1, or the quiet started again while active.
    private var activeSince: ContinuousClock.Instant
    /// Time the network was wanted and gave nothing, in earlier active spells since the last byte.
    private var quietBefore = Duration.zero
    /// When the last `.stalled` event of this stall was due (nil: none since the quiet started).
    private var stallToldAt: ContinuousClock.Instant?
    /// No mirror could be reached, and no byte came since.
    private(set) var isOffline = false
    private var onlineDue = false

    init(now: ContinuousClock.Instant) { activeSince = now }

    /// Whether this stall was told (a `.stalled` event went out since the quiet started).
    var stallTold: Bool { stallToldAt != nil }

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

    /// A byte came: the quiet starts again, and the sync is online again if it was offline.
    mutating func heard(_ now: ContinuousClock.Instant) {
        restart(now)
        if isOffline {
            isOffline = false
            onlineDue = true
        }
    }

    /// The quiet starts again with no byte (the cap held the transfers back, the process did not run).
    mutating func restart(_ now: ContinuousClock.Instant) {
        quietBefore = .zero
        activeSince = now
        stallToldAt = nil
    }

    /// No mirror could be reached; true when the sync was online until now (an `.offline` event is due).
    mutating func wentOffline() -> Bool {
        defer { isOffline = true }
        if onlineDue {
            onlineDue = false  // the `.online` not sent yet is moot: the reader still sees the sync offline
            return false
        }
        return !isOffline
    }

    /// The quiet while the network is wanted, once it is a second or more (nil: not wanted, or a byte came).
    func stalled(_ now: ContinuousClock.Instant) -> Duration? {
        guard active > 0 else { return nil }
        let quiet = self.quiet(now)
        return quiet >= .seconds(1) ? quiet : nil
    }

    /// The quiet, the first time it is asked after `after` with no byte in a stall (nil otherwise).
    mutating func reportStall(after: Duration, now: ContinuousClock.Instant) -> Duration? {
        guard active > 0, stallToldAt == nil else { return nil }
        let quiet = self.quiet(now)
        guard quiet >= after else { return nil }
        stallToldAt = now
        return quiet
    }

    /// What a tick of the watch does now.
    struct Due: Equatable {
        /// Bytes came after `.offline`: an `.online` event.
        var online = false
        /// A `.stalled` event with this quiet: the first after `stallAfter` with no byte, then one every
        /// ``NetworkQuiet/heartbeat`` while it lasts.
        var stalled: Duration?
        /// The sync gives up: no byte for this long, `giveUpAfter` or more.
        var giveUp: Duration?
    }

    /// The watch's tick at `now`: what is due. `asleep` is when the watch slept before this tick (from
    /// just before its sleep to just after it): a sleep of ``frozen`` or more starts the quiet again from
    /// the wake. The time of the ticks' own work is no freeze, however long.
    mutating func check(
        now: ContinuousClock.Instant, asleep: Range<ContinuousClock.Instant>? = nil,
        stallAfter: Duration = Self.stallAfter, giveUpAfter: Duration?
    ) -> Due {
        if let asleep, asleep.upperBound - asleep.lowerBound >= Self.frozen { restart(asleep.upperBound) }
        var due = Due(online: onlineDue)
        onlineDue = false
        if let quiet = reportStall(after: stallAfter, now: now) {
            due.stalled = quiet
        } else if let told = stallToldAt, now - told >= Self.heartbeat, let quiet = stalled(now) {
            stallToldAt = now
            due.stalled = quiet
        }
        if let giveUpAfter, let quiet = stalled(now), quiet >= giveUpAfter { due.giveUp = quiet }
        return due
    }
}
