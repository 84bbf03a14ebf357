import ArgumentParser
import Foundation
import PatchSync

struct Keygen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create the Ed25519 keys of a repository: root, targets and online.",
        discussion: """
            root.key signs the root (keep it offline), targets.key signs what builds exist (publish, \
            promote, rollback: keep it off always-on hosts), online.key signs snapshot and timestamp \
            (the only key the `repo refresh` cron job holds).

            Examples:
              patchsync keygen --out keys/
              patchsync keygen --out second-root/ --role root    # another root key, for a threshold of 2
            """)

    @Option(help: "The folder for the key files (created, files mode 0600).")
    var out: String

    @Option(help: "Write only this role's key (root, targets or online); repeat for several.")
    var role: [String] = []

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() async throws {
        let paths = try Keys.generate(into: out, roles: role.isEmpty ? Keys.roles : role)
        let written = [paths.rootKey, paths.targetsKey, paths.onlineKey].compactMap { $0 }
        Output(json: json).result(paths, human: "wrote " + written.joined(separator: ", "))
    }
}
