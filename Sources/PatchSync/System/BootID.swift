import Foundation

/// The running kernel's boot id (`/proc/sys/kernel/random/boot_id`, new at every boot). Staging writes
/// without fsync and names the boot in its resume records: bytes written in this boot are in the
/// page cache even if the process was killed, while after a reboot (a power cut) they may be lost, so
/// records of an earlier boot are checked by hash before they are trusted.
enum BootID {
    static let current: String = {
        let text = (try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8)) ?? ""
        let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
        // Without /proc no boot can be told from another: every stamp then needs a re-read to be trusted.
        return id.isEmpty ? "unknown-\(UUID().uuidString)" : id
    }()
}
