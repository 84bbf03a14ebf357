import ArgumentParser
import Foundation
import PatchSync

/// `patchsync bundles`: which bundles of the build an install holds, and the player's choice of optional ones.
struct BundlesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bundles",
        abstract: "List the build's bundles, or choose which optional ones this install holds.",
        discussion: """
            Required bundles are always installed; optional ones (languages, HD packs, DLC) only when
            chosen. A change takes effect like an update: the next sync stages a deployment with the
            new choice (an added bundle fetches only its own content) and the launcher swaps it in at
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
        case .pending: state = "pending" + (e.bytesDone.map { $0 > 0 ? " (\(ByteCount.format($0)) written)" : "" } ?? "")
        case .notSelected: state = "not installed"
        }
        return "\(e.name.padding(toLength: 16, withPad: " ", startingAt: 0)) \(kind.padding(toLength: 17, withPad: " ", startingAt: 0)) "
            + "\(ByteCount.format(e.bytes).padding(toLength: 11, withPad: " ", startingAt: 0)) \(state)"
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the bundles of the newest build this install knows, with size, kind and state.",
            discussion: "Example:\n  patchsync bundles list --install ~/Games/forest --json")

        @OptionGroup var options: ClientOptions

        func run() async throws {
            let install = try Install.open(at: options.install)
            guard let progress = try install.bundleProgress() else {
                throw PatchSyncError(.usage, "\(install.root) knows no build yet", remedy: "run `patchsync sync --install \(install.root)` first")
            }
            let lines = ["build \(progress.buildId): " + ProgressReporter.describe(progress)] + progress.bundles.map(BundlesCommand.describe)
            Output(json: options.json).result(progress, human: lines.joined(separator: "\n"))
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Choose optional bundles to install; the next sync fetches only their content.",
            discussion: "Example:\n  patchsync bundles add voices-fr hd-textures --install ~/Games/forest")

        @Argument(help: "Optional bundle names.") var names: [String]
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try BundlesCommand.change(options, adding: names, removing: [])
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Stop installing optional bundles; their files go at the apply after the next sync.",
            discussion: "Example:\n  patchsync bundles remove hd-textures --install ~/Games/forest")

        @Argument(help: "Optional bundle names.") var names: [String]
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try BundlesCommand.change(options, adding: [], removing: names)
        }
    }

    static func change(_ options: ClientOptions, adding: [String], removing: [String]) throws(PatchSyncError) {
        let install = try Install.open(at: options.install)
        let choice = try install.chooseBundles(adding: adding, removing: removing)
        var human = "optional bundles chosen: " + (choice.chosen.map { $0.isEmpty ? "none" : $0.joined(separator: ", ") }
            ?? "every one" + (choice.excluded.isEmpty ? "" : " but " + choice.excluded.joined(separator: ", ")))
        if !choice.unknown.isEmpty {
            human += "\nnot in the newest known build (kept, installed when a build has them): " + choice.unknown.joined(separator: ", ")
        }
        human += "\nnext: patchsync sync --install \(install.root) (the launcher applies the change at the next start)"
        Output(json: options.json).result(choice, human: human)
    }
}
