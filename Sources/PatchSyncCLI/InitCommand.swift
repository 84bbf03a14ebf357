import ArgumentParser
import Foundation
import PatchSync

struct Init: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Make a folder an install that follows a channel of an origin.",
        discussion: """
            Example:
              patchsync init --install ~/Games/forest --remote https://cdn.example.com/forest \\
                  --remote https://mirror.example.net/forest --root root.json
            """)

    @Option(help: "The install folder (default: the current directory).") var install: String = "."
    @Option(help: "A mirror of the origin (http, https or file URL); repeat for more, tried in order.")
    var remote: [String] = []
    @Option(help: "The root.json shipped with the game: the start of the trust chain.") var root: String
    @Option(help: "The channel to follow.") var channel: String = "live"
    @Option(help: "A PEM file of certificate authorities to trust for https remotes (besides the system's).")
    var caFile: String?
    @Option(
        name: .customLong("bundle"),
        help: "An optional bundle to install; repeat for more (default: every optional bundle).")
    var bundles: [String] = []
    @Flag(help: "Install the required bundles only (add optional ones later with `patchsync bundles add`).")
    var requiredOnly = false
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        var config = InstallConfig(remotes: remote, channel: channel)
        guard bundles.isEmpty || !requiredOnly else {
            throw PatchSyncError(
                .usage, "--bundle and --required-only contradict each other",
                remedy: "give the optional bundles to install with --bundle, or --required-only for none")
        }
        if requiredOnly || !bundles.isEmpty { config.bundles = Array(Set(bundles)).sorted() }
        config.caFile = caFile.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        let created = try Install.create(at: install, config: config, trustedRoot: root)
        Output(json: json).result(
            try created.status(),
            human: "\(created.root) follows channel \(channel) of \(remote.joined(separator: ", "))\n"
                + "next: patchsync sync --install \(created.root)")
    }
}
