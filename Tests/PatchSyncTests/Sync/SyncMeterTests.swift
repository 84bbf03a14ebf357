import Foundation
import PatchSyncTestSupport
import Synchronization
import Testing

@testable import PatchSync

@Suite("The sync meter: when a sync is stalled, and where arrival events are sent from")
struct SyncMeterTests {
    final class Events: Sendable {
        let list = Mutex<[SyncEvent]>([])
        var count: Int { list.withLock { $0.count } }
    }

    @Test(
        "the quiet goes on through a request libcurl cut off, the backoff before the retry and the retry: a frozen origin is stalled and given up on however often requests restart"
    )
    func quietSpansRetries() {
        let meter = SyncMeter(onEvent: { _ in })
        let t0 = ContinuousClock.now
        meter.requestBegan(now: t0)
        meter.requestEnded(now: t0 + .seconds(6))  // cut off for low speed
        meter.requestBegan(now: t0 + .seconds(6))  // the backoff
        meter.requestEnded(now: t0 + .seconds(9))
        meter.requestBegan(now: t0 + .seconds(9))  // the retry
        #expect(meter.stalled(now: t0 + .seconds(12)) == .seconds(12))
        #expect(meter.reportStall(after: .seconds(10), now: t0 + .seconds(12)) == .seconds(12))
        #expect(meter.reportStall(after: .seconds(10), now: t0 + .seconds(13)) == nil, "once per stall")
    }

    @Test(
        "time with nothing asked of the network is no quiet (local work between steps), and a byte, or bytes dropped before a range, start it again"
    )
    func idleAndHeard() {
        let meter = SyncMeter(onEvent: { _ in })
        let t0 = ContinuousClock.now
        meter.requestBegan(now: t0)
        meter.requestEnded(now: t0 + .seconds(2))
        #expect(meter.stalled(now: t0 + .seconds(60)) == nil, "nothing in flight")
        meter.requestBegan(now: t0 + .seconds(60))
        #expect(meter.stalled(now: t0 + .seconds(63)) == .seconds(5))
        meter.heard(now: t0 + .seconds(63))
        #expect(meter.stalled(now: t0 + .seconds(63.5)) == nil)
        #expect(meter.stalled(now: t0 + .seconds(70)) == .seconds(7))
    }

    @Test(
        "transfers waiting for the cap's tokens are the cap at work: no stall while they wait, whatever the cap is now")
    func throttledIsNoStall() {
        let meter = SyncMeter(onEvent: { _ in })
        let waiting = Mutex(true)
        meter.throttled { waiting.withLock { $0 } }
        let t0 = ContinuousClock.now
        meter.requestBegan(now: t0)
        #expect(meter.reportStall(after: .seconds(10), now: t0 + .seconds(30)) == nil)
        waiting.withLock { $0 = false }
        #expect(meter.stalled(now: t0 + .seconds(31)) == .seconds(1), "the quiet counts from the last wait")
    }

    @Test(
        "arriving bytes never send an event from the transfer thread: it waits for the watch's flush, and a new step drops one not sent"
    )
    func arrivalEventsWaitForFlush() {
        let events = Events()
        let meter = SyncMeter(onEvent: { event in events.list.withLock { $0.append(event) } })
        let clock = ManualClock(Date())
        let progress = TransferProgress(total: 1000, filesTotal: 1, clock: clock.instant)
        meter.follow(progress)
        clock.advance(by: 0.6)  // past the time between events
        meter.arrived(100)
        #expect(events.count == 0)
        meter.flush()
        #expect(events.count == 1)
        meter.flush()
        #expect(events.count == 1, "sent once")
        clock.advance(by: 0.6)
        meter.arrived(100)
        meter.follow(nil)
        meter.flush()
        #expect(events.count == 1, "the step ended: its late event is dropped")
    }
}

@Suite("Transfer events in order")
struct TransferOrderTests {
    @Test(
        "an arrival event made before a step's last and sent after it shows the last's counts; a late one of an ended step is dropped"
    )
    func staleEvents() throws {
        let clock = ManualClock(Date())
        let step = TransferProgress(total: 1000, filesTotal: 2, clock: clock.instant)
        clock.advance(by: 0.6)
        guard case .transfer(let early)? = step.received(400) else { throw Failure("no arrival event") }
        guard case .transfer(let final)? = step.add(1000, files: 2) else { throw Failure("no final event") }
        var order = TransferOrder()
        #expect(order.admit(final)?.done == 1000)
        #expect(order.admit(early)?.done == 1000, "the bar never goes back from the step's end")
        let next = TransferProgress(total: 500, filesTotal: 1)
        guard case .transfer(let first)? = next.add(500, files: 1) else { throw Failure("no event of the next step") }
        #expect(order.admit(first)?.done == 500)
        #expect(order.admit(early) == nil, "the ended step's late event is not shown against the next step")
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}

@Suite("Following a sync through its event log")
struct SyncEventLogTests {
    static func write(_ lines: [SyncEventLog.Line], to path: String) throws {
        var data = Data()
        for line in lines {
            data.append(try JSONEncoder.iso.encode(line))
            data.append(0x0a)
        }
        try data.write(to: URL(fileURLWithPath: path))
    }

    @Test(
        "a follower attached to a sync that a foreground one took over as it attached reads the first sync's lines and result from the file before, not a claim that it was killed"
    )
    func followAcrossTakeOver() async throws {
        let folder = NSTemporaryDirectory() + "patchsync-log-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/sync-events.jsonl"
        let (background, foreground): (Int32, Int32) = (999_990, 999_991)  // no such processes: both have ended
        var ended = SyncEventLog.Line(pid: background)
        ended.error = SyncEventLog.ErrorRecord(PatchSyncError(.deferred, "another sync took over", reason: .otherSync))
        try Self.write(
            [SyncEventLog.Line(.phase(.fetching, "fetching"), pid: background), ended], to: SyncEventLog.previous(path))
        try Self.write([SyncEventLog.Line(.phase(.checking, "checking"), pid: foreground)], to: path)
        let seen = Mutex<[SyncEvent]>([])
        let error = await #expect(throws: PatchSyncError.self) {
            _ = try await Install.follow(path, process: ProcessIdentity(pid: background, startTicks: nil)) { event, _ in
                seen.withLock { $0.append(event) }
            }
        }
        #expect(error?.reason == .otherSync, "\(String(describing: error))")
        #expect(seen.withLock { $0.count } == 1, "the background sync's own event, not the foreground's")
    }

    @Test(
        "a sync whose process is gone without a result is reported stopped (75, progress kept), not an origin that failed"
    )
    func killedWithoutResult() async throws {
        let folder = NSTemporaryDirectory() + "patchsync-log-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/sync-events.jsonl"
        try Self.write([SyncEventLog.Line(.phase(.fetching, "fetching"), pid: 999_990)], to: path)
        let error = await #expect(throws: PatchSyncError.self) {
            _ = try await Install.follow(path, process: ProcessIdentity(pid: 999_990, startTicks: nil)) { _, _ in }
        }
        #expect(error?.code == .deferred && error?.reason == .stopped, "\(String(describing: error))")
    }

    @Test(
        "regression: a follower that attaches late starts from a snapshot (the latest of each kind and every warning) at the times the sync recorded them, not the whole history replayed and stamped anew"
    )
    func attachStartsFromSnapshot() async throws {
        let folder = NSTemporaryDirectory() + "patchsync-log-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let path = folder + "/sync-events.jsonl", pid: Int32 = 999_990
        let events: [SyncEvent] = [
            .phase(.checking, "checking"), .stalled(seconds: 5), .warning("a"), .stalled(seconds: 10),
            .phase(.fetching, "fetching"), .stalled(seconds: 15), .warning("b")
        ]
        var lines = events.enumerated().map { index, event in
            var line = SyncEventLog.Line(event, pid: pid)
            line.time = 1_000_000 + Double(index)
            return line
        }
        var ended = SyncEventLog.Line(pid: pid)
        ended.error = SyncEventLog.ErrorRecord(PatchSyncError(.deferred, "stopped", reason: .stopped))
        lines.append(ended)
        try Self.write(lines, to: path)
        let seen = Mutex<[(String, Double?)]>([])
        _ = await #expect(throws: PatchSyncError.self) {
            _ = try await Install.follow(path, process: ProcessIdentity(pid: pid, startTicks: nil)) { event, time in
                seen.withLock { $0.append(("\(event)", time?.timeIntervalSince1970)) }
            }
        }
        let shown = seen.withLock { $0 }
        #expect(shown.map(\.1) == [1_000_002, 1_000_004, 1_000_005, 1_000_006], "\(shown)")
        #expect(
            shown.map(\.0) == [
                "\(SyncEvent.warning("a"))", "\(SyncEvent.phase(.fetching, "fetching"))",
                "\(SyncEvent.stalled(seconds: 15))", "\(SyncEvent.warning("b"))"
            ])
    }
}
