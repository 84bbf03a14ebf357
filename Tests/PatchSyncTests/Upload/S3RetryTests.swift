import Foundation
import PatchSyncTestSupport
import Synchronization
import Testing

@testable import PatchSync

/// A retry clock that moves only when the retries wait: each wait is recorded and added to its time,
/// and the jitter is fixed at 0.5. Nothing sleeps.
final class SteppedRetryClock: Sendable {
    private struct State {
        var now = ContinuousClock.now
        var waits: [Duration] = []
    }

    private let state = Mutex(State())

    /// The waits between attempts, in order.
    var waits: [Duration] { state.withLock { $0.waits } }

    var clock: S3Connection.RetryClock {
        S3Connection.RetryClock(
            now: { self.state.withLock { $0.now } }, random: { 0.5 },
            wait: { delay in
                self.state.withLock { state in
                    state.now = state.now.advanced(by: delay)
                    state.waits.append(delay)
                }
            })
    }

    /// The policy's backoff (jitter 0.5) before each retry after the first `failures` failures.
    static func backoffs(_ failures: Int) -> [Duration] {
        (0..<failures).map { RetryPolicy.backoff($0 + 1, random: 0.5) }
    }
}

/// Issue: one retry policy, uploads included. The S3 client's retries are ``RetryPolicy``'s decisions,
/// stepped with an injected clock.
@Suite("S3 requests under the retry policy", .tags(.small))
struct S3RetryTests {
    static let cut = TransferFailure.network("Recv failure: Connection reset by peer")

    static func answer(_ status: Int) -> S3Connection.Attempt {
        .answered(S3Connection.Response(status: status, body: Data()))
    }

    static func failed(_ failure: TransferFailure) -> S3Connection.Attempt {
        .failed(failure, PatchSyncError(.originUnavailable, "PUT http://127.0.0.1/game/objects/ab/cd: \(failure)"))
    }

    /// Runs one request whose attempts come to `script` in turn (the last one again once it runs out):
    /// its outcome, and the attempts made.
    static func run(_ script: [S3Connection.Attempt], clock: SteppedRetryClock)
        -> (outcome: Result<S3Connection.Response, PatchSyncError>, attempts: Int)
    {
        var attempts = 0
        do throws(PatchSyncError) {
            let response = try S3Connection.withRetries("PUT objects/ab/cd", clock: clock.clock) {
                () throws(PatchSyncError) -> S3Connection.Attempt in
                attempts += 1
                return script[min(attempts, script.count) - 1]
            }
            return (.success(response), attempts)
        } catch {
            return (.failure(error), attempts)
        }
    }

    @Test("a 503 twice then 200: three attempts, each retry after the policy's backoff, and the 200 is the answer")
    func unavailableTwice() throws {
        let clock = SteppedRetryClock()
        let (outcome, attempts) = Self.run([Self.answer(503), Self.answer(503), Self.answer(200)], clock: clock)
        #expect(try outcome.get().status == 200)
        #expect(attempts == 3)
        #expect(clock.waits == SteppedRetryClock.backoffs(2), "\(clock.waits)")
        #expect(clock.waits == [.milliseconds(100), .milliseconds(200)])
    }

    @Test(
        "a 4xx is the store's answer, asked once; 408, 429 and 5xx are asked again",
        arguments: [(400, 1), (401, 1), (403, 1), (404, 1), (409, 1), (408, 2), (429, 2), (500, 2), (502, 2), (503, 2)])
    func statuses(status: Int, expected: Int) throws {
        let clock = SteppedRetryClock()
        let (outcome, attempts) = Self.run([Self.answer(status), Self.answer(200)], clock: clock)
        #expect(attempts == expected, "HTTP \(status)")
        #expect(
            try outcome.get().status == (expected == 1 ? status : 200),
            "the answer goes to the caller, which refuses it")
        #expect(clock.waits == SteppedRetryClock.backoffs(expected - 1))
    }

    @Test(
        "a cut connection or a timeout is retried after the backoff",
        arguments: [
            cut, .network("Operation timed out after 30000 milliseconds"),
            .network("transfer closed with 512 bytes remaining to read"), .network("Could not connect to server")
        ])
    func networkRetried(failure: TransferFailure) throws {
        let clock = SteppedRetryClock()
        let (outcome, attempts) = Self.run([Self.failed(failure), Self.answer(200)], clock: clock)
        #expect(try outcome.get().status == 200)
        #expect(attempts == 2)
        #expect(clock.waits == SteppedRetryClock.backoffs(1))
    }

    @Test(
        "a store that keeps failing is asked five times in all: its last 503 goes to the caller, or the last connection error is thrown"
    )
    func bounded() {
        let clock = SteppedRetryClock()
        let (unavailable, asked) = Self.run([Self.answer(503)], clock: clock)
        #expect(asked == S3Connection.attempts && S3Connection.attempts == 5)
        #expect((try? unavailable.get())?.status == 503)
        #expect(clock.waits == SteppedRetryClock.backoffs(4), "\(clock.waits)")

        let (unreachable, tried) = Self.run([Self.failed(Self.cut)], clock: SteppedRetryClock())
        #expect(tried == 5)
        guard case .failure(let error) = unreachable else {
            Issue.record("the request succeeded")
            return
        }
        #expect(error.code == .originUnavailable && error.message.contains("Connection reset by peer"), "\(error)")
    }

    @Test(
        "what an attempt throws (an option libcurl refused, a local error) ends the request at once, though its code is 69"
    )
    func thrownNotRetried() {
        let clock = SteppedRetryClock()
        var attempts = 0
        do throws(PatchSyncError) {
            _ = try S3Connection.withRetries("PUT objects/ab/cd", clock: clock.clock) {
                () throws(PatchSyncError) -> S3Connection.Attempt in
                attempts += 1
                throw PatchSyncError(
                    .originUnavailable,
                    "libcurl 7.68.0 lacks CURLOPT_AWS_SIGV4 (libcurl 7.75.0 or later, built with it); nothing was sent")
            }
            Issue.record("the request succeeded")
        } catch {
            #expect(error.message.contains("CURLOPT_AWS_SIGV4"), "\(error)")
        }
        #expect(attempts == 1)
        #expect(clock.waits.isEmpty)
    }

    @Test("a TLS certificate that does not verify is not asked again")
    func untrustedNotRetried() {
        let clock = SteppedRetryClock()
        let (outcome, attempts) = Self.run(
            [
                Self.failed(.untrusted("SSL certificate problem: unable to get local issuer certificate")),
                Self.answer(200)
            ], clock: clock)
        #expect(attempts == 1)
        #expect(clock.waits.isEmpty)
        #expect((try? outcome.get()) == nil, "the error is thrown")
    }
}

/// The same decisions over libcurl, against a loopback server that fails the first requests.
@Suite("S3 requests retried over a real connection", .tags(.medium))
struct S3RetryConnectionTests {
    /// A folder served as bucket `game` holding `metadata/timestamp.json`, and the bytes of that file.
    static func served() throws -> (root: String, bytes: Data) {
        let root = NSTemporaryDirectory() + "patchsync-s3-retry-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: root + "/game/metadata", withIntermediateDirectories: true)
        let bytes = Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31) })
        try bytes.write(to: URL(fileURLWithPath: root + "/game/metadata/timestamp.json"))
        return (root, bytes)
    }

    static func connection(_ origin: FaultOrigin, clock: SteppedRetryClock) throws -> S3Connection {
        let bucket = try S3Bucket(
            url: "s3://game", endpoint: origin.url, region: "us-east-1",
            credentials: .init(accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret"))
        return try S3Connection(bucket, clock: clock.clock)
    }

    /// Each fault, and how many of the first requests it hits (and so how many retries there are).
    static let faults: [(FaultOrigin.Fault, Int)] = [(.unavailable, 2), (.closeMidBody, 1), (.missing, 0)]

    @Test(
        "a GET answered 503 twice, or cut half-way through its body, is asked again until it arrives; a 404 is asked once",
        arguments: faults)
    func retriedOverCurl(fault: FaultOrigin.Fault, retries: Int) throws {
        let (root, bytes) = try Self.served()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let origin = try FaultOrigin(root: root, fault: fault, count: max(1, retries), prefix: "/game/")
        let clock = SteppedRetryClock()
        let got = try Self.connection(origin, clock: clock).get("metadata/timestamp.json", limit: 1 << 20)
        #expect(got == (fault == .missing ? nil : bytes))
        #expect(clock.waits == SteppedRetryClock.backoffs(retries), "\(retries + 1) attempt(s): \(clock.waits)")
    }
}
