import ArgumentParser
import PatchSync

/// `--wait`: how long a command that writes an origin waits for another one holding its lock (a CI job
/// beside the cron refresh) before it gives up with exit 75.
struct OriginWait: ParsableArguments {
    @Option(help: "Wait this long for another command writing the origin (30s, 10m; default: none, exit 75 at once).")
    var wait: String?

    func apply() throws(PatchSyncError) {
        guard let wait else { return }
        OriginLock.wait = try parseDuration(wait, allowZero: true)
    }
}
