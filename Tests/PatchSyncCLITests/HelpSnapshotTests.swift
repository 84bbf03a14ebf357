import ArgumentParser
import Foundation
import PatchSyncCLI
import PatchSyncTestSupport
import Testing

/// The `--help` of every command, pinned: a change to help text is a visible diff in
/// Snapshots/help/<command path with dashes>.txt, and a new command without a snapshot fails.
@Suite("Help snapshots", .tags(.cli))
struct HelpSnapshotTests {
    /// Every command's path below `patchsync` (the root is `[]`), depth first in the configuration's order.
    static let commands: [[String]] = paths(of: PatchSyncCommand.self, at: [])

    static func paths(of command: any ParsableCommand.Type, at path: [String]) -> [[String]] {
        [path] + command.configuration.subcommands.flatMap { paths(of: $0, at: path + [$0._commandName]) }
    }

    @Test("Snapshots/commands.txt, which regenerate.sh reads, lists every command of the tree in its order")
    func commandList() throws {
        let tree = Self.commands.map(HelpSnapshot.line)
        if HelpSnapshot.updating {
            try HelpSnapshot.write(HelpSnapshot.listHeader + tree.joined(separator: "\n") + "\n", to: HelpSnapshot.list)
            Issue.record(
                "wrote \(HelpSnapshot.list.path) (PATCHSYNC_UPDATE_SNAPSHOTS=1 is set): review it, then test without it"
            )
            return
        }
        let text = (try? String(contentsOf: HelpSnapshot.list, encoding: .utf8)) ?? ""
        let listed = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        #expect(
            listed == tree,
            """
            \(HelpSnapshot.list.path) is not the command tree (- listed, + tree):
            \(HelpSnapshot.diff(listed.joined(separator: "\n"), tree.joined(separator: "\n")))
            to rewrite it and the snapshots: \(HelpSnapshot.regenerate)
            """)
    }

    @Test("every command's --help (80 columns, no terminal) is its snapshot", arguments: commands)
    func help(path: [String]) throws {
        let result = try CLI.run(path + ["--help"], environment: ["COLUMNS": "80"])
        #expect(result.status == 0, "\(result.stderr)")
        try HelpSnapshot.check(
            result.stdout, against: HelpSnapshot.file(path), what: "`\(HelpSnapshot.line(path)) --help`")
    }

    @Test("the help snapshots are exactly one per command: none missing, none left from a removed command")
    func oneSnapshotPerCommand() throws {
        let wanted = Set(Self.commands.map { HelpSnapshot.file($0).lastPathComponent })
        let present = Set(
            ((try? FileManager.default.contentsOfDirectory(atPath: HelpSnapshot.help.path)) ?? [])
                .filter { $0.hasSuffix(".txt") })
        if HelpSnapshot.updating {
            for stray in present.subtracting(wanted) {
                try FileManager.default.removeItem(at: HelpSnapshot.help.appendingPathComponent(stray))
            }
            Issue.record(
                "removed stray snapshots \(present.subtracting(wanted).sorted()) (PATCHSYNC_UPDATE_SNAPSHOTS=1 is set)")
            return
        }
        #expect(
            present == wanted,
            """
            in \(HelpSnapshot.help.path): missing \(wanted.subtracting(present).sorted()), \
            stray \(present.subtracting(wanted).sorted()); to rewrite them: \(HelpSnapshot.regenerate)
            """)
    }
}

/// Where the help snapshots live, how a command is named there, and how one is compared or rewritten.
enum HelpSnapshot {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Snapshots")
    static let help = folder.appendingPathComponent("help")
    /// The command list that regenerate.sh reads, one `patchsync …` line per command.
    static let list = folder.appendingPathComponent("commands.txt")
    static let listHeader = """
        # Every command of patchsync, depth first as PatchSyncCommand.configuration lists them; each has
        # its --help in help/<the words joined by dashes>.txt. HelpSnapshotTests checks this list against
        # the command tree, and regenerate.sh reads it.


        """

    /// How to write the snapshots anew, for a failure message.
    static let regenerate =
        "PATCHSYNC_UPDATE_SNAPSHOTS=1 swift test --filter HelpSnapshotTests, "
        + "or Tests/PatchSyncCLITests/Snapshots/regenerate.sh .build/debug/patchsync"

    /// PATCHSYNC_UPDATE_SNAPSHOTS=1: write the snapshots instead of comparing (and fail, so CI never passes so).
    static var updating: Bool { ProcessInfo.processInfo.environment["PATCHSYNC_UPDATE_SNAPSHOTS"] == "1" }

    /// "patchsync repo init" for `["repo", "init"]`.
    static func line(_ path: [String]) -> String { (["patchsync"] + path).joined(separator: " ") }

    /// help/patchsync-repo-init.txt for `["repo", "init"]`.
    static func file(_ path: [String]) -> URL {
        help.appendingPathComponent((["patchsync"] + path).joined(separator: "-") + ".txt")
    }

    /// Compares `actual` with the snapshot `file`: a missing or different one is an issue with a diff;
    /// with PATCHSYNC_UPDATE_SNAPSHOTS=1 the file is written and the issue says so.
    static func check(
        _ actual: String, against file: URL, what: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let expected = try? String(contentsOf: file, encoding: .utf8)
        if updating {
            let outcome = expected == actual ? "snapshot unchanged" : "wrote \(file.path)"
            if expected != actual { try write(actual, to: file) }
            Issue.record(
                "\(what): \(outcome) (PATCHSYNC_UPDATE_SNAPSHOTS=1 is set): review the diff, then test without it",
                sourceLocation: sourceLocation)
            return
        }
        guard let expected else {
            Issue.record(
                "\(what): no snapshot \(file.path); to write it: \(regenerate)", sourceLocation: sourceLocation)
            return
        }
        guard expected != actual else { return }
        Issue.record(
            """
            \(what) is not \(file.lastPathComponent) (- snapshot, + now):
            \(diff(expected, actual))
            if the change is meant, rewrite the snapshots: \(regenerate)
            """, sourceLocation: sourceLocation)
    }

    static func write(_ text: String, to file: URL) throws {
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(text.utf8).write(to: file, options: .atomic)
    }

    /// The lines only in `old` (`-N: …`, N its line number there) and only in `new` (`+N: …`), in
    /// line order, at most 40 of them.
    static func diff(_ old: String, _ new: String) -> String {
        let before = old.split(separator: "\n", omittingEmptySubsequences: false)
        let after = new.split(separator: "\n", omittingEmptySubsequences: false)
        var changes: [(line: Int, removal: Bool, text: String)] = []
        for change in after.difference(from: before) {
            switch change {
            case .remove(let offset, let text, _): changes.append((offset + 1, true, "-\(offset + 1): \(text)"))
            case .insert(let offset, let text, _): changes.append((offset + 1, false, "+\(offset + 1): \(text)"))
            }
        }
        changes.sort { ($0.line, $0.removal ? 0 : 1) < ($1.line, $1.removal ? 0 : 1) }
        let shown = changes.prefix(40).map(\.text)
        return (shown + (changes.count > 40 ? ["… and \(changes.count - 40) more changed lines"] : [])).joined(
            separator: "\n")
    }
}
