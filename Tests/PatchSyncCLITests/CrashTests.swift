import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Checks that `current` resolves to a complete build: every file of its manifest, with its hash and mode.
func expectCompleteBuild(_ install: Install, sourceLocation: SourceLocation = #_sourceLocation) throws {
    guard let deployment = install.currentDeployment() else { return }  // nothing installed yet is consistent too
    let build = deployment.split(separator: "@").first.map(String.init) ?? deployment
    let manifest = try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath:
        install.root + "/.patchsync/manifests/\(build).json.gz")), what: "manifest")
    let expected = Dictionary(uniqueKeysWithValues: manifest.files.map {
        ($0.path, FileFacts(sha256: $0.sha256.hex, mode: Int($0.mode & 0o555)))
    })
    let actual = try treeFacts(install.root + "/current")
    let differing = Set(actual.keys).union(expected.keys).filter { actual[$0] != expected[$0] }.sorted()
    #expect(differing.isEmpty, "current (\(deployment)) differs from its manifest: \(differing.prefix(5))",
            sourceLocation: sourceLocation)
}

/// `PRAGMA integrity_check` of the install's state database, read by python's sqlite3.
func integrityCheck(_ install: Install) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])",
                         install.root + "/.patchsync/state.db"]
    let out = Pipe()
    process.standardOutput = out
    try process.run()
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    return text.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// A build tree that changes a little with every release: a few files rewritten from `seed`.
func evolve(_ tree: String, release: Int) throws {
    var rng = SeededRandom(seed: UInt64(release))
    try Data("release \(release)\n".utf8).write(to: URL(fileURLWithPath: tree + "/config/default.cfg"))
    for i in [release % 120, (release * 7) % 120] {
        try Data(rng.bytes(20_000 + Int(rng.next() % 40_000))).write(to: URL(fileURLWithPath: tree + "/textures/tex_\(i).dds"))
    }
}

@Suite("Crash consistency", .tags(.cli), .serialized)
struct CrashTests {
    static let loops = Int(ProcessInfo.processInfo.environment["PATCHSYNC_CRASH_LOOPS"] ?? "") ?? 30

    @Test("SIGKILL at random instants of sync, stage and apply: current is always one complete build, state.db is intact, the next sync completes")
    func killLoop() throws {
        let fixture = try Fixture()
        let tree = try fixture.sampleBuild(1, scale: 0.005)
        try fixture.publish(tree, id: "0")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        var rng = SeededRandom(seed: 42)
        var killed = 0
        for release in 1...Self.loops {
            try evolve(tree, release: release)
            try fixture.publish(tree, id: "\(release)")
            let sync = try CLI.start(["sync", "--install", install.root])
            usleep(UInt32(rng.next() % 250_000))
            if sync.process.isRunning { kill(sync.process.processIdentifier, SIGKILL); killed += 1 }
            sync.process.waitUntilExit()
            let apply = try CLI.start(["apply", "--install", install.root])
            usleep(UInt32(rng.next() % 15_000))
            if apply.process.isRunning { kill(apply.process.processIdentifier, SIGKILL); killed += 1 }
            apply.process.waitUntilExit()

            try expectCompleteBuild(install)
            #expect(try integrityCheck(install) == "ok")
            let resync = try CLI.run(["sync", "--install", install.root])
            #expect(resync.status == 0, "release \(release): \(resync.stderr)")
            #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
            #expect(install.currentBuild() == "\(release)")
            try expectCompleteBuild(install)
        }
        print("crash loop: \(Self.loops) releases, \(killed) runs killed")
        #expect(killed >= Self.loops / 3, "the loop should interrupt a fair share of runs (killed \(killed))")
    }
}
