import Foundation

/// What counts the bytes of a run's transfers as they arrive (the sync's meter): ``HTTPClient`` tells it
/// of every request and every byte, and asks it whether the run is throttled.
protocol ByteMeter: Sendable {
    /// `check` says whether the transfers wait for a rate limit's tokens (not a stall).
    func throttled(by check: @escaping @Sendable () -> Bool)
    func requestBegan(now: ContinuousClock.Instant)
    func requestEnded(now: ContinuousClock.Instant)
    /// The network is alive (bytes that do not count as progress arrived).
    func heard(now: ContinuousClock.Instant)
    /// A server answered a range request with the whole body: `wasted` bytes before the range came again.
    func rangeIgnored(_ url: String, wasted: Int64)
    func arrived(_ count: Int, now: ContinuousClock.Instant)
    /// A retry waits out its backoff (the network is wanted all that time).
    func backingOff(_ wait: Duration) async throws(PatchSyncError)
    /// No mirror could be reached at its last try; `failures` says what each did.
    func offline(_ failures: String)
    /// A request failed and is tried again, as `status` says.
    func retrying(_ status: RetryStatus)
}

extension ByteMeter {
    func requestBegan() { requestBegan(now: .now) }
    func requestEnded() { requestEnded(now: .now) }
    func heard() { heard(now: .now) }
    func arrived(_ count: Int) { arrived(count, now: .now) }
}

/// A response sink that tells the sync's meter of what arrives before handing it on: counted as bytes
/// arrived (`counting`), or only heard (the network is alive: no stall, no progress).
final class MeteredSink: ResponseSink, @unchecked Sendable {
    private let inner: any ResponseSink
    private let meter: any ByteMeter
    private let counting: Bool

    init(_ inner: any ResponseSink, meter: any ByteMeter, counting: Bool = true) {
        self.inner = inner
        self.meter = meter
        self.counting = counting
    }

    func receive(_ bytes: UnsafeRawBufferPointer) -> PatchSyncError? {
        if counting { meter.arrived(bytes.count) } else { meter.heard() }
        return inner.receive(bytes)
    }

    func dropped(_ count: Int) { meter.heard() }
}

/// A request that failed and is tried again, as the `.retrying` event says it.
public struct RetryStatus: Codable, Sendable, Equatable {
    /// What was asked ("object ab12…", "metadata/timestamp.json").
    public var what: String
    /// The mirror of the next try, and the one that failed.
    public var mirror: String
    public var failedMirror: String
    /// The attempt that failed (1 for the first).
    public var attempt: Int
    /// When the next try comes.
    public var retryInSeconds: Int
    /// Why the attempt failed, in words.
    public var failure: String
}
