import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Where the game runs: in the folder of the build launch started, whatever folder launch ran in.
@Suite("The game's working directory", .tags(.cli))
struct LaunchWorkingDirectoryTests {
    /// The folder a player starts `patchsync launch` from.
    enum Start: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// `current/`: the build live before launch's apply, which the apply retires to trash/.
        case insideCurrent
        /// A folder outside the install.
        case elsewhere

        var testDescription: String { rawValue }
    }

    /// The game: waits (at most 10 s) until launch's clean-up has emptied trash/, then prints its
    /// working directory and the build's VERSION read through it.
    static let game = """
        #!/bin/sh
        trash="${PATCHSYNC_CONTENT_ROOT%/current}/.patchsync/trash"
        i=0
        while [ -n "$(ls -A "$trash" 2>/dev/null)" ] && [ "$i" -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
        if [ -n "$(ls -A "$trash" 2>/dev/null)" ]; then echo "trash=left"; else echo "trash=empty"; fi
        echo "pwd=$(pwd -P)"
        echo "version=$(cat ./VERSION)"

        """

    @Test(
        "launch runs the game in the build it applied (builds/, never trash/), finds a relative command in that build from any folder, and its clean-up never deletes the game's folder",
        arguments: Start.allCases, ["./bin/game", "bin/game"])
    func gameRunsInItsBuild(start: Start, command: String) throws {
        let fixture = try Fixture()
        let tree = fixture.directory + "/tree"
        try Self.writeBuild(version: "1", into: tree)
        try fixture.publish(tree, id: "1")
        // One build kept: the apply inside launch retires build 1 (the folder behind current/) to trash/.
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote]) { $0.keepBuilds = 1 }
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        try Self.writeBuild(version: "2", into: tree)
        try fixture.publish(tree, id: "2")
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try install.status().ready != nil, "build 2 is ready, not applied")

        let folder = start == .insideCurrent ? install.root + "/current" : fixture.directory + "/elsewhere"
        try FileManager.default.createDirectory(
            atPath: fixture.directory + "/elsewhere", withIntermediateDirectories: true)
        let result = try Self.run(["launch", "--install", install.root, "--", command], in: folder)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("applied build 2"), "\(result.stderr)")
        #expect(install.currentBuild() == "2")
        let deployment = try #require(install.currentDeployment())
        let build = try Self.physical(install.root + "/builds/" + deployment)
        #expect(
            result.stdout.split(separator: "\n").map(String.init) == ["trash=empty", "pwd=\(build)", "version=2"],
            "\(result.stdout)\(result.stderr)")
        #expect(!result.stdout.contains("/.patchsync/trash/"))
    }

    /// A build whose `bin/game` is ``game`` and whose `VERSION` is `version`.
    static func writeBuild(version: String, into tree: String) throws {
        try FileManager.default.createDirectory(atPath: tree + "/bin", withIntermediateDirectories: true)
        try Data(version.utf8).write(to: URL(fileURLWithPath: tree + "/VERSION"))
        try Data(game.utf8).write(to: URL(fileURLWithPath: tree + "/bin/game"))
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: tree + "/bin/game")
    }

    /// `path` with every symbolic link resolved, as `pwd -P` prints it.
    static func physical(_ path: String) throws -> String {
        let resolved = try #require(realpath(path, nil))
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Runs `patchsync ARGS…` from `folder`, as a player's shell would, and captures what it printed.
    static func run(_ arguments: [String], in folder: String) throws -> CLI.Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: folder)
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()  // the game's few lines
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return CLI.Result(
            status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self),
            stderr: String(decoding: stderr, as: UTF8.self))
    }
}
