import ArgumentParser
import Foundation
import PatchSync

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show installed, previous, staged and ready builds.",
        discussion: """
            It reads the install's state, so it answers at once however many files the game has. --disk adds \
            each build folder's disk use, which reads every file's size.

            Example:
              patchsync status --install ~/Games/forest --json
              patchsync status --install ~/Games/forest --disk
            """)

    @OptionGroup var options: ClientOptions
    @Flag(help: "Add the disk use of each build folder and of staging (walks every file).")
    var disk = false

    func run() async throws {
        let status = try options.openInstall().status(diskUsage: disk)
        var lines = [
            "install:  \(status.install)", "channel:  \(status.channel) from \(status.remotes.joined(separator: ", "))",
            "current:  \(status.current ?? "none")" + Self.why(status.currentRollback),
            "previous: \(status.previous ?? "none")"
                + (status.recycling.map {
                    " (\($0)'s folder is being brought forward to the build being staged: "
                        + "no rollback to it)"
                } ?? ""),
            "ready:    \(status.ready ?? "none")" + Self.why(status.readyRollback)
        ]
        if let held = status.heldBack { lines.append("held back: \(held) (rolled back from)") }
        for build in status.builds {
            lines.append(
                "build:    \(build.name)" + (build.diskBytes.map { ": \(ByteCount.format($0)) on disk" } ?? ""))
        }
        if let bytes = status.stagingDiskBytes { lines.append("staging:  \(ByteCount.format(bytes)) on disk") }
        if let s = status.staging {
            lines.append(
                "progress: \(s.buildId): \(s.chunksDone)/\(s.chunksTotal) chunks written "
                    + "(\(ByteCount.format(s.bytesDone)) of \(ByteCount.format(s.bytesTotal)), unchanged files not counted)"
            )
        }
        if let r = status.routes {
            lines.append(
                "files:    \(r.buildId): \(r.linked) unchanged (linked), \(r.delta) patched by delta, "
                    + "\(r.chunks) from chunks")
        }
        if let r = status.running {
            let eta = r.etaSeconds.map { String(format: ", ETA %d:%02d", $0 / 60, $0 % 60) } ?? ""
            lines.append(
                "syncing:  process \(r.pid): \(ByteCount.format(r.bytesDone)) of \(ByteCount.format(r.bytesTotal)) "
                    + "at \(ByteCount.format(r.bytesPerSecond))/s\(eta)")
        }
        if let d = status.deferral {
            lines.append(
                "deferred: \(d.message) (\(d.count) in a row); next discretionary attempt after "
                    + d.nextAttempt.formatted(.iso8601))
        }
        if let links = status.liveLinks, let folders = status.liveEmptyFolders, links + folders > 0 {
            lines.append("live:     \(links) symbolic links, \(folders) empty folders besides the files")
        }
        if let preload = status.preload { lines.append("preload:  " + preload.summary) }
        if let b = status.bundles {
            lines.append("bundles:  " + ProgressReporter.describe(b))
            for entry in b.bundles { lines.append("          " + BundlesCommand.describe(entry)) }
        }
        Output(json: options.json).result(status, human: lines.joined(separator: "\n"))
    }

    /// " (the publisher rolled the channel back from 1.1: reason)" for a build a rollback put back.
    static func why(_ note: RollbackNote?) -> String {
        note.map {
            " (the publisher rolled the channel back from \($0.from)" + ($0.reason.map { ": \($0)" } ?? "") + ")"
        } ?? ""
    }
}
