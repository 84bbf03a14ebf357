import Foundation
import Logging

extension S3Connection {
    /// What one attempt at an S3 request came to, as ``withRetries(_:attempts:clock:_:)`` is told.
    enum Attempt {
        /// The store answered, whatever the status: 5xx, 429 and 408 are retried, the rest is the caller's.
        case answered(Response)
        /// No answer (the connection, a timeout, TLS): the failure the policy judges, and the error that
        /// reports it if it is the last.
        case failed(TransferFailure, PatchSyncError)
    }

    /// The time, the jitter and the wait that the retries of a blocking request use: ``system`` for
    /// uploads; tests pass one that records each wait and moves its own time, so nothing sleeps.
    struct RetryClock: Sendable {
        var now: @Sendable () -> ContinuousClock.Instant
        /// A number in [0, 1) for the backoff's jitter.
        var random: @Sendable () -> Double
        /// Blocks the calling thread for the policy's delay.
        var wait: @Sendable (Duration) -> Void

        /// The machine's clock. An upload's requests block their worker thread (``S3Connection``), so
        /// the wait does too: a timed wait on a semaphore that nothing signals, for the delay the
        /// policy decided.
        static let system = RetryClock(
            now: { .now }, random: { Double.random(in: 0..<1) },
            wait: { delay in
                let (seconds, attoseconds) = delay.components
                let nanoseconds = max(0, seconds) * 1_000_000_000 + max(0, attoseconds) / 1_000_000_000
                _ = DispatchSemaphore(value: 0).wait(timeout: .now() + .nanoseconds(Int(nanoseconds)))
            })
    }

    private static let logger = Logger(label: "patchsync.upload")

    /// Runs `attempt` as ``RetryPolicy`` decides, the policy the downloads use, on the one endpoint:
    /// a failure to connect or a timeout, 5xx, 429 and 408 are retried after its backoff (full jitter),
    /// until `attempts` failures in a row; another status, or a TLS certificate that does not verify,
    /// ends the request at once. What `attempt` throws (an option libcurl refused, a local error) is
    /// never retried. Returns the last answer, whatever its status, for the caller to judge; throws
    /// the last failure's error when no attempt got an answer. The one place where S3 requests wait.
    static func withRetries(
        _ what: String, attempts: Int = S3Connection.attempts, clock: RetryClock,
        _ attempt: () throws(PatchSyncError) -> Attempt
    ) throws(PatchSyncError) -> Response {
        var group = MirrorGroup(mirrors: 1, failureStreak: attempts)
        var policy = RetryPolicy()
        var decision = policy.start(group, now: clock.now())
        var last: Attempt?
        while case .attempt(let endpoint, let delay) = decision {
            if delay > .zero { clock.wait(delay) }
            let outcome = try attempt()
            let failure: TransferFailure
            switch outcome {
            case .answered(let response):
                failure = .httpStatus(response.status)
                guard failure.isRetryable else { return response }
            case .failed(let cause, _):
                failure = cause
            }
            last = outcome
            logger.notice("\(what) failed: \(failure)")
            decision = policy.next(
                after: failure, on: endpoint, progressed: false, group: &group, now: clock.now(),
                random: clock.random())
        }
        switch last {
        case .answered(let response)?: return response
        case .failed(_, let error)?: throw error
        case nil: throw PatchSyncError(.internal, "no attempt was made at \(what)")
        }
    }
}
