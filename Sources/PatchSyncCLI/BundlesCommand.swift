import ArgumentParser
import Foundation
import PatchSync

/// `patchsync bundles`: which bundles of the build an install holds, and the player's choice of optional ones.
struct BundlesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bundles",
        abstract: "List the build's bundles, or choose which optional ones this install holds.",
        discussion: """
            Required bundles are always installed; optional ones (languages, HD packs, DLC) only when \
            chosen. A change takes effect like an update: the next sync stages a deployment with the \
            new choice (an added bundle fetches only its own content) and the launcher swaps it in at \
            the next start; a removed bundle's files are gone after that apply.

            Example:
              patchsync bundles --install ~/Games/forest
              patchsync bundles add voices-fr --install ~/Games/forest && patchsync sync --install ~/Games/forest
            """,
        subcommands: [List.self, Add.self, Remove.self],
        defaultSubcommand: List.self)

    /// "voices-fr  optional, chosen   120.0 MiB  pending (40.0 MiB written)"
    static func describe(_ e: BundleProgress.Entry) -> String {
        let kind = e.required ? "required" : e.selected ? "optional, chosen" : "optional"
        let state: String
        switch e.state {
        case .live: state = "live"
        case .ready: state = "ready (goes live at the next start)"
        case .pending:
            state = "pending" + (e.bytesDone.map { $0 > 0 ? " (\(ByteCount.format($0)) written)" : "" } ?? "")
        case .notSelected: state = "not installed"
        }
        return
            "\(e.name.padding(toLength: 16, withPad: " ", startingAt: 0)) \(kind.padding(toLength: 17, withPad: " ", startingAt: 0)) "
            + "\(ByteCount.format(e.bytes).padding(toLength: 11, withPad: " ", startingAt: 0)) \(state)"
    }

    static func change(_ options: ClientOptions, adding: [String], removing: [String]) throws(PatchSyncError) {
        let install = try options.openInstall()
        let choice = try install.chooseBundles(adding: adding, removing: removing)
        var human =
            "optional bundles chosen: "
            + (choice.chosen.map { $0.isEmpty ? "none" : $0.joined(separator: ", ") }
                ?? "every one" + (choice.excluded.isEmpty ? "" : " but " + choice.excluded.joined(separator: ", ")))
        if !choice.unknown.isEmpty {
            human +=
                "\nnot in the newest known build (kept, installed when a build has them): "
                + choice.unknown.joined(separator: ", ")
        }
        human += "\nnext: patchsync sync --install \(install.root) (the launcher applies the change at the next start)"
        Output(json: options.json).result(choice, human: human)
    }
}
