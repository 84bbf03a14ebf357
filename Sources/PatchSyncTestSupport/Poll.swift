import Foundation
import PatchSync

/// How tests wait for what another thread or process does: they poll for a condition, never sleep for
/// a fixed time. The one place a test waits; a condition that never comes ends the wait at `timeout`,
/// and the caller's next expectation says what did not happen.
public enum Poll {
    /// Polls `done` every `every` until it holds (true) or `timeout` passes (false).
    @discardableResult
    public static func until(
        timeout: Duration = .seconds(30), every: Duration = .milliseconds(20), _ done: () throws -> Bool
    ) rethrows -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            if try done() { return true }
            if ContinuousClock.now >= deadline { return false }
            Thread.sleep(
                forTimeInterval: Double(every.components.seconds) + Double(every.components.attoseconds) / 1e18)
        }
    }

    /// ``until(timeout:every:_:)`` from async code, without blocking its thread (a blocked thread of the
    /// cooperative pool could be the one the awaited work needs).
    @discardableResult
    public static func untilAsync(
        timeout: Duration = .seconds(30), every: Duration = .milliseconds(20), _ done: () async throws -> Bool
    ) async rethrows -> Bool {
        let deadline = ContinuousClock.now + timeout
        while true {
            if try await done() { return true }
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: every)
        }
    }

    /// Waits until the sync staging in `install` has recorded `chunks` chunks, while `running` (the sync's
    /// process, when it is one) still runs; false when it never did. The wait is long: on a loaded test
    /// pool a sync in this process may not run for a while, and only a failure waits it out.
    @discardableResult
    public static func staging(
        _ install: Install, chunks: Int = 2, timeout: Duration = .seconds(300), while running: Process? = nil
    ) -> Bool {
        until(timeout: timeout) {
            if let running, !running.isRunning { return true }
            return ((try? install.status().staging?.chunksDone) ?? 0) >= chunks
        } && ((try? install.status().staging?.chunksDone) ?? 0) >= chunks
    }

    /// ``staging(_:chunks:timeout:while:)`` from async code, without blocking its thread.
    @discardableResult
    public static func stagingAsync(_ install: Install, chunks: Int = 2, timeout: Duration = .seconds(300)) async
        -> Bool
    {
        await untilAsync(timeout: timeout) { ((try? install.status().staging?.chunksDone) ?? 0) >= chunks }
    }
}
