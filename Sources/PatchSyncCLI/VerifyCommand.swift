import ArgumentParser
import Foundation
import PatchSync

struct Verify: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check the live tree against its manifest; with --repair, stage a repaired build.",
        discussion: """
            Fast mode trusts files whose size, mtime and inode match the stat cache and hashes the \
            rest; --full hashes everything. Damage (missing, wrong size, wrong hash, wrong mode) is \
            reported per file and exits 65. --repair stages a repaired build (good files linked, \
            damaged ones rebuilt from local chunks where they verify, fetched otherwise) for the \
            next apply; --now applies it at once unless the game runs.

            Example:
              patchsync verify --install ~/Games/forest --repair --now
            """)

    @OptionGroup var options: ClientOptions
    @Flag(help: "Hash every file, whatever the stat cache says.") var full = false
    @Flag(help: "Stage a repaired build of the damaged files.") var repair = false
    @Flag(help: "With --repair: apply the repaired build at once (refused while the game runs).") var now = false

    func run() async throws {
        let output = Output(json: options.json)
        let install = try options.openInstall()
        var report = try install.verify(full: full)
        if repair && !report.damaged.isEmpty {
            report.repairStaged = try await Syncer(install: install).repair(report) { event in
                if case .phase(_, let message) = event { output.event(ProgressEvent(event: "phase", message: message)) }
            }
            if now { report.applied = try install.applyPendingUpdate().applied }
        }
        output.result(report, human: Self.describe(report))
        if !report.damaged.isEmpty && report.repairStaged == nil { throw ExitCode(ExitStatus.refusedData) }
    }

    static func describe(_ r: VerifyReport) -> String {
        var lines = [
            "checked \(r.filesChecked) files of build \(r.deployment) (\(r.filesHashed) hashed): "
                + (r.damaged.isEmpty ? "all intact" : "\(r.damaged.count) damaged")
        ]
        for d in r.damaged {
            lines.append(
                "  \(d.problem.rawValue): \(d.path) (expected \(d.expected)\(d.actual.map { ", found \($0)" } ?? ""))")
        }
        if let staged = r.repairStaged {
            lines.append(
                r.applied
                    ? "repaired build \(staged) is now current"
                    : "repaired build \(staged) is staged; it goes live at the next apply or launch")
        } else if !r.damaged.isEmpty {
            lines.append("next: patchsync verify --repair (add --now to apply at once)")
        }
        return lines.joined(separator: "\n")
    }
}
