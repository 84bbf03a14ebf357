import ArgumentParser
import Foundation
import PatchSync

/// The conformance adapter: the client command line of the TUF project's conformance suite
/// (tuf-conformance), driving PatchSync's TUF client. Exit 0 on full success, 1 otherwise.
@main
struct TUFClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "patchsync-tuf-client",
        abstract: "PatchSync's TUF client behind the TUF conformance suite's client protocol.",
        discussion: """
            Commands:
              init TRUSTED_ROOT   trust this root.json (no network)
              refresh             run the client workflow for the top-level metadata
              download            refresh, then fetch and verify --target-name (delegations searched)
            Trusted metadata is kept in --metadata-dir as root.json, timestamp.json, snapshot.json,
            targets.json and <role>.json. Exit status: 0 on full success, 1 otherwise.
            PATCHSYNC_TUF_NOW (ISO 8601 or Unix seconds) sets the time expiry is checked against (tests).

            Example:
              patchsync-tuf-client --metadata-dir meta init root.json
              patchsync-tuf-client --metadata-dir meta --metadata-url http://127.0.0.1:8000/metadata/ refresh
              patchsync-tuf-client --metadata-dir meta --metadata-url http://127.0.0.1:8000/metadata/ \\
                --target-name file.txt --target-base-url http://127.0.0.1:8000/targets/ --target-dir dl download
            """)

    @Option(name: .customLong("metadata-dir"), help: "Folder of the trusted metadata.")
    var metadataDir: String

    @Option(name: .customLong("metadata-url"), help: "Base URL of the repository's metadata.")
    var metadataURL: String?

    @Option(name: .customLong("target-name"), help: "The target path to download.")
    var targetName: String?

    @Option(name: .customLong("target-base-url"), help: "Base URL of the repository's targets.")
    var targetBaseURL: String?

    @Option(name: .customLong("target-dir"), help: "Folder the downloaded target is stored in.")
    var targetDir: String?

    @Argument(help: "init, refresh or download.")
    var command: String

    @Argument(help: "For init: the trusted root.json.")
    var trustedRoot: String?

    static func main() async {
        do {
            var command = try parseAsRoot()
            if let adapter = command as? TUFClientCommand { try await adapter.run() } else { try command.run() }
        } catch let error as PatchSyncError {
            FileHandle.standardError.write(Data("patchsync-tuf-client: \(error.description)\n".utf8))
            Foundation.exit(1)
        } catch {
            if exitCode(for: error) == .success { exit(withError: error) }
            FileHandle.standardError.write(Data("patchsync-tuf-client: \(fullMessage(for: error))\n".utf8))
            Foundation.exit(1)
        }
    }

    func run() async throws {
        let client = ConformanceClient(metadataDirectory: metadataDir, now: try Self.injectedNow() ?? Date())
        switch command {
        case "init":
            guard let trustedRoot else { throw ValidationError("init needs the trusted root.json") }
            try client.initialize(trustedRoot: trustedRoot)
        case "refresh":
            try await client.refresh(metadataURL: try need(metadataURL, "--metadata-url"))
        case "download":
            try await client.download(
                target: try need(targetName, "--target-name"),
                metadataURL: try need(metadataURL, "--metadata-url"),
                targetBaseURL: try need(targetBaseURL, "--target-base-url"),
                targetDirectory: try need(targetDir, "--target-dir"))
        default:
            throw ValidationError("unknown command \(command): use init, refresh or download")
        }
    }

    private func need(_ value: String?, _ option: String) throws -> String {
        guard let value else { throw ValidationError("\(command) needs \(option)") }
        return value
    }

    static func injectedNow() throws -> Date? {
        guard let text = ProcessInfo.processInfo.environment["PATCHSYNC_TUF_NOW"], !text.isEmpty else { return nil }
        if let seconds = Double(text) { return Date(timeIntervalSince1970: seconds) }
        if let date = ISO8601DateFormatter().date(from: text) { return date }
        throw ValidationError("PATCHSYNC_TUF_NOW=\(text) is neither ISO 8601 nor Unix seconds")
    }
}
