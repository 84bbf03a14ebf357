internal import CLinux
import Foundation

/// CPU and I/O priority of this process, for background syncs that players must not notice.
///
/// Linux keeps scheduling policy, nice value and I/O priority per thread, and a new thread
/// inherits them from the thread that creates it: so every thread that exists is lowered, and
/// the ones created afterwards (curl's, the verify workers, the flusher) start low.
public enum Priority {
    /// What `lowerForBackground()` got.
    public struct Outcome: Codable, Sendable, Equatable {
        /// "idle" (SCHED_IDLE) or "nice 19" where SCHED_IDLE was refused.
        public var cpu: String
        /// "idle" (IOPRIO_CLASS_IDLE), or "unchanged" where refused.
        public var io: String
    }

    /// sched_setscheduler(2) SCHED_IDLE (setpriority(2) nice 19 where refused) and ioprio_set(2)
    /// idle class, for every thread of the process.
    @discardableResult
    public static func lowerForBackground() -> Outcome {
        var outcome = Outcome(cpu: "idle", io: "idle")
        for tid in threads() {
            var parameter = sched_param(sched_priority: 0)
            if sched_setscheduler(tid, schedIdle, &parameter) != 0 {
                outcome.cpu = "nice 19"
                _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(tid), 19)
            }
            if clinux_ioprio_set_thread(tid, ioprioClassIdle, 0) != 0 { outcome.io = "unchanged" }
        }
        return outcome
    }

    /// The threads of this process (/proc/self/task), or just the calling one.
    static func threads() -> [pid_t] {
        let listed = ((try? FileSystem.list("/proc/self/task")) ?? []).compactMap { pid_t($0) }
        return listed.isEmpty ? [pid_t(0)] : listed
    }

    /// SCHED_IDLE from <sched.h>, which Swift's Glibc module leaves out (it needs _GNU_SOURCE).
    static let schedIdle: Int32 = 5
    /// IOPRIO_CLASS_IDLE from <linux/ioprio.h>.
    static let ioprioClassIdle: Int32 = 3
}
