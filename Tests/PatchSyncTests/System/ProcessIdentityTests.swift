import Foundation
import Testing

@testable import PatchSync

@Suite("A process told from a later one with its pid", .tags(.small))
struct ProcessIdentityTests {
    @Test(
        "a sync record whose pid now belongs to another process (a killed sync, its pid reused) is no running sync: status and attach see none"
    )
    func reusedPid() {
        let now = Date()
        var record = RunningSync(
            pid: getppid(), startedAt: now, updatedAt: now, bytesDone: 0, bytesTotal: 0, bytesPerSecond: 0,
            etaSeconds: nil)
        record.processStart = ProcessIdentity.startTicks(of: getppid())
        #expect(record.processStart != nil, "this machine's /proc tells start times")
        #expect(RunningSync.alive(record, now: now) != nil, "the process with that pid and start time runs")
        record.processStart = (record.processStart ?? 0) + 1
        #expect(
            RunningSync.alive(record, now: now) == nil,
            "the same pid, started at another time: not the sync that wrote it")
        record.processStart = nil
        #expect(
            RunningSync.alive(record, now: now) != nil,
            "a record without a start time (an older writer) is judged by its pid")
    }

    @Test("this process's identity: running, and its start time read past a command name with spaces and parentheses")
    func current() {
        let me = ProcessIdentity.current
        #expect(me.pid == getpid() && me.startTicks != nil && me.isRunning)
    }
}
