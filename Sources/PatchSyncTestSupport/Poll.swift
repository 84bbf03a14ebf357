import Foundation
import PatchSync

/// How tests wait for what another thread or process does: they poll for a condition, never sleep for
/// a fixed time. The one place a test waits; a condition that never comes ends the wait, and the
/// caller's next expectation says what did not happen.
///
/// A wait is a number of polls (`timeout` / `every`), not a deadline on the wall clock: on a loaded test
/// pool a poll may come late, and so may the work it waits for (a sync in the test's own process shares
/// the cooperative threads that blocking tests hold); counted polls stretch with both, where a deadline
/// would fail a wait for work that never got to run.
public enum Poll {
    /// Polls `done` every `every`, at most `timeout` / `every` times, until it holds (true); false when
    /// it never did.
    @discardableResult
    public static func until(
        timeout: Duration = .seconds(30), every: Duration = .milliseconds(20), _ done: () throws -> Bool
    ) rethrows -> Bool {
        for _ in 0..<polls(timeout, every) {
            if try done() { return true }
            Thread.sleep(forTimeInterval: every.inSeconds)
        }
        return try done()
    }

    private static func polls(_ timeout: Duration, _ every: Duration) -> Int { max(1, Int(timeout / every)) }

    /// ``until(timeout:every:_:)`` from async code, without blocking its thread (a blocked thread of the
    /// cooperative pool could be the one the awaited work needs).
    @discardableResult
    public static func untilAsync(
        timeout: Duration = .seconds(30), every: Duration = .milliseconds(20), _ done: () async throws -> Bool
    ) async rethrows -> Bool {
        for _ in 0..<polls(timeout, every) {
            if try await done() { return true }
            try? await Task.sleep(for: every)
        }
        return try await done()
    }

    /// Waits until the sync staging in `install` has recorded `chunks` chunks, while `running` (the sync's
    /// process, when it is one) still runs; false when it never did.
    @discardableResult
    public static func staging(
        _ install: Install, chunks: Int = 2, timeout: Duration = .seconds(30), while running: Process? = nil
    ) -> Bool {
        until(timeout: timeout) {
            if let running, !running.isRunning { return true }
            return ((try? install.status().staging?.chunksDone) ?? 0) >= chunks
        } && ((try? install.status().staging?.chunksDone) ?? 0) >= chunks
    }

    /// ``staging(_:chunks:timeout:while:)`` from async code, without blocking its thread.
    @discardableResult
    public static func stagingAsync(_ install: Install, chunks: Int = 2, timeout: Duration = .seconds(30)) async
        -> Bool
    {
        await untilAsync(timeout: timeout) { ((try? install.status().staging?.chunksDone) ?? 0) >= chunks }
    }
}
