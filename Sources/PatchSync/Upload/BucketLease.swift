import Foundation
import Synchronization

/// The right to write a bucket-backed repository, held by one command on one machine at a time: the key
/// `.patchsync-lease.json` under the prefix, created with `If-None-Match: *` and renewed in place with
/// `If-Match` (compare-and-swap on its ETag) every quarter of its time to live.
///
/// A holder that was killed stops renewing; another writer takes the lease over once it has seen the
/// same version of the key for a whole time to live by its own clock (never by comparing two machines'
/// clocks), again with `If-Match`, so of two waiters only one gets it. A holder whose renewal was refused
/// has lost the lease and must not commit (``check()``); the commit itself is conditional too
/// (``BucketOrigin``), so a holder that stalled past its lease can never overwrite what the next one wrote.
///
/// Thread-safety: the renewal runs on a thread of its own with its own connection; the shared state is
/// under a mutex.
public final class BucketLease: Sendable {
    /// The key, relative to the prefix: outside the folders a client reads, so no mirror copies it.
    public static let key = ".patchsync-lease.json"
    /// How long a lease lives without renewal: `PATCHSYNC_BUCKET_LEASE_SECONDS`, else 60 s.
    public static var timeToLive: TimeInterval {
        ProcessInfo.processInfo.environment["PATCHSYNC_BUCKET_LEASE_SECONDS"].flatMap(Double.init).map {
            max(0.5, $0)
        } ?? 60
    }

    struct Body: Codable {
        var holder: String
        var purpose: String
        var ttl: Double
        /// Counts renewals, so every renewal has other bytes (and so another ETag).
        var renewal: Int
        var released: Bool
    }

    private struct State {
        var etag: String
        var body: Body
        var lost: String?
        var lastRenewed: ContinuousClock.Instant
        var stopping = false
    }

    let bucket: S3Bucket
    private let state: Mutex<State>
    private let stopped = DispatchSemaphore(value: 0)

    /// Takes the lease for `purpose`, waiting up to `wait` seconds while someone else holds it; still held
    /// then, fails as deferred (exit 75) naming the holder.
    ///
    /// A lease is stale when it was released, or has gone a whole time to live (and a second, the
    /// resolution of `Last-Modified`) without renewal by the store's own clock (its `Date` less the key's
    /// `Last-Modified`), or, where the store gives no such headers, by this machine's clock while it
    /// watches the key stay the same. A stale lease is taken over with `If-Match`, so of two waiters one
    /// gets it.
    public init(bucket: S3Bucket, purpose: String, wait: TimeInterval, ttl: TimeInterval = BucketLease.timeToLive)
        throws(PatchSyncError)
    {
        self.bucket = bucket
        let connection = try S3Connection(bucket)
        let holder = "\(ProcessInfo.processInfo.hostName) pid \(getpid()) \(UUID().uuidString.prefix(8))"
        var body = Body(holder: holder, purpose: purpose, ttl: ttl, renewal: 0, released: false)
        let start = ContinuousClock.now
        var seen: (etag: String, since: ContinuousClock.Instant)?
        while true {
            let sent = ContinuousClock.now
            if let etag = try Self.write(body, connection, when: .absent) {
                state = Mutex(State(etag: etag, body: body, lastRenewed: sent))
                break
            }
            guard let (data, etag, age) = try connection.getWithAge(Self.key, limit: 64 << 10), let etag else {
                guard ContinuousClock.now - start < .seconds(max(wait, 5)) else {
                    throw PatchSyncError(
                        .originUnavailable,
                        "s3://\(bucket.bucket)/\(bucket.prefix): \(Self.key) can neither be created nor read (or has no ETag)",
                        remedy:
                            "check the store: it must support conditional writes (If-None-Match, If-Match) and ETags")
                }
                Thread.sleep(forTimeInterval: 0.2)
                continue
            }
            let theirs = try? JSONDecoder().decode(Body.self, from: data)
            let since = seen?.etag == etag ? seen?.since ?? .now : ContinuousClock.now
            seen = (etag, since)
            let limit = theirs?.ttl ?? ttl
            let unrenewed = age.map { $0 > limit + 1 } ?? (ContinuousClock.now - since > .seconds(limit))
            if theirs?.released ?? false || unrenewed || theirs == nil {
                body.renewal = (theirs?.renewal ?? 0) + 1
                let sent = ContinuousClock.now
                if let taken = try Self.write(body, connection, when: .matching(etag)) {
                    state = Mutex(State(etag: taken, body: body, lastRenewed: sent))
                    break
                }
                continue
            }
            guard ContinuousClock.now - start < .seconds(wait) else {
                throw Self.busy(bucket, theirs, purpose: purpose, waited: wait, ttl: limit)
            }
            Thread.sleep(forTimeInterval: min(1, max(0.05, limit / 8)))
        }
        do { try Self.requireConditionalWrites(body, connection, bucket) } catch {
            var released = body
            released.released = true
            released.renewal += 1
            if let etag = state.withLock({ $0.etag }) as String? {
                _ = try? Self.write(released, connection, when: .matching(etag))
            }
            throw error
        }
        let lease = UncheckedLease(lease: self)
        Thread { lease.lease.renewLoop() }.start()
    }

    /// The error for a lease still held by `theirs` after `waited` seconds.
    private static func busy(_ bucket: S3Bucket, _ theirs: Body?, purpose: String, waited: TimeInterval, ttl: Double)
        -> PatchSyncError
    {
        PatchSyncError(
            .deferred,
            "s3://\(bucket.bucket)/\(bucket.prefix) is being written by \(theirs?.holder ?? "another command") "
                + "(\(theirs?.purpose ?? "unknown")); \(purpose) must wait"
                + (waited > 0 ? " (waited \(Int(waited)) s)" : ""),
            remedy: "run it again when that command has finished, or give --wait 10m; a holder that was "
                + "killed lets go by itself \(Int(ttl)) s after its last renewal",
            reason: .busy)
    }

    /// Refuses a store that ignores `If-None-Match` or `If-Match` (it answered a create of the lease it now
    /// holds, or a replace of it over an ETag it never had, with success): two writers could then both
    /// hold it, and overwrite each other's signed files.
    private static func requireConditionalWrites(_ body: Body, _ connection: S3Connection, _ bucket: S3Bucket)
        throws(PatchSyncError)
    {
        guard try write(body, connection, when: .absent, recognizingOwn: false) == nil,
            try write(body, connection, when: .matching("\"00000000000000000000000000000000\""), recognizingOwn: false)
                == nil
        else {
            throw PatchSyncError(
                .usage,
                "s3://\(bucket.bucket)/\(bucket.prefix): the store ignores conditional writes (If-None-Match: * "
                    + "or If-Match replaced a key it should have left)",
                remedy: "use a store that supports them (AWS S3, R2, MinIO, GCS), or publish into a local origin "
                    + "folder and `patchsync upload` it")
        }
    }

    /// Throws when the lease was lost (a renewal refused, or none for a whole time to live): the holder
    /// must not commit.
    public func check() throws(PatchSyncError) {
        let (lost, age, ttl) = state.withLock { ($0.lost, ContinuousClock.now - $0.lastRenewed, $0.body.ttl) }
        if let lost { throw Self.lostError(bucket, lost) }
        // Another writer takes over only after a whole time to live (and a second) without renewal by the
        // store's clock: a holder renewed within one time to live by its own still holds it.
        if age > .seconds(ttl) {
            throw Self.lostError(bucket, "it was last renewed \(age) ago, and lives \(Int(ttl)) s")
        }
    }

    /// Lets go of the lease: the next writer takes it at once. Idempotent; every holder must call it (the
    /// renewal thread keeps the lease alive until then).
    public func release() {
        let first = state.withLock { state -> Bool in
            defer { state.stopping = true }
            return !state.stopping
        }
        guard first else { return }
        stopped.wait()
        let (etag, body, lost) = state.withLock { ($0.etag, $0.body, $0.lost) }
        guard lost == nil, let connection = try? S3Connection(bucket) else { return }
        var released = body
        released.released = true
        released.renewal += 1
        _ = try? Self.write(released, connection, when: .matching(etag))
    }

    private func renewLoop() {
        defer { stopped.signal() }
        guard let connection = try? S3Connection(bucket) else {
            state.withLock { $0.lost = "no connection to renew it" }
            return
        }
        while true {
            let (stopping, ttl) = state.withLock { ($0.stopping, $0.body.ttl) }
            if stopping { return }
            Thread.sleep(forTimeInterval: min(0.25, ttl / 16))
            let due = state.withLock { state -> (String, Body)? in
                guard !state.stopping, state.lost == nil,
                    ContinuousClock.now - state.lastRenewed >= .seconds(state.body.ttl / 4)
                else { return nil }
                var next = state.body
                next.renewal += 1
                return (state.etag, next)
            }
            guard let (etag, next) = due else { continue }
            let sent = ContinuousClock.now  // the store dates the renewal no earlier than this
            do throws(PatchSyncError) {
                let renewed = try Self.write(next, connection, when: .matching(etag))
                state.withLock { state in
                    if let renewed {
                        state.etag = renewed
                        state.body = next
                        state.lastRenewed = sent
                    } else {
                        state.lost = "another writer took it over"
                    }
                }
            } catch {
                continue  // the store failed: try again; check() judges by the time since the last renewal
            }
        }
    }

    /// Writes `body` under `condition`: the new ETag, or nil when the precondition failed. A failed
    /// precondition whose key now holds this very body (an earlier attempt of the request landed, its
    /// answer lost) is success.
    private static func write(
        _ body: Body, _ connection: S3Connection, when condition: S3Connection.Precondition,
        recognizingOwn: Bool = true
    ) throws(PatchSyncError) -> String? {
        let data = (try? JSONEncoder().encode(body)) ?? Data()
        let write = recognizingOwn ? connection.putOrFind : connection.put
        guard
            let etag = try write(key, data, nil, "no-store", "application/json", condition)
        else { return nil }
        guard !etag.isEmpty else {
            throw PatchSyncError(
                .originUnavailable, "the store answered a write of \(key) without an ETag",
                remedy: "use a store that gives ETags (AWS S3, R2, MinIO, GCS)")
        }
        return etag
    }

    static func lostError(_ bucket: S3Bucket, _ why: String) -> PatchSyncError {
        PatchSyncError(
            .deferred,
            "lost the lease on s3://\(bucket.bucket)/\(bucket.prefix) (\(why)); nothing was committed",
            remedy: "run the command again: it starts from what the bucket holds now", reason: .busy)
    }
}

/// The lease handed to its renewal thread. Thread-safety: ``BucketLease`` is Sendable; this only
/// carries it into the thread's closure.
private struct UncheckedLease: @unchecked Sendable {
    let lease: BucketLease
}
