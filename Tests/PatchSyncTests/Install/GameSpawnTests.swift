import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// The game starts in its build, on every glibc: with posix_spawn_file_actions_addchdir_np (2.29 and
/// later) and through `/bin/sh` where it is missing.
@Suite("Starting the game in its build folder", .tags(.small))
struct GameSpawnTests {
    @Test(
        "a relative command runs in the build folder, with its arguments, both with addchdir and through the shell fallback",
        arguments: [false, true])
    func startsInBuild(throughShell: Bool) throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("spawn-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder + "/bin", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        // Written by another process: a write descriptor of this one's, inherited by a child another test forks
        // at that moment, would make the exec fail with ETXTBSY.
        let script =
            #"printf '#!/bin/sh\npwd > "$1"\necho "$2" >> "$1"\nexit 7\n' > "$0/bin/game" && chmod 755 "$0/bin/game""#
        let written = Process()
        written.executableURL = URL(fileURLWithPath: "/bin/sh")
        written.arguments = ["-c", script, folder]
        try written.run()
        written.waitUntilExit()
        #expect(written.terminationStatus == 0)
        let out = folder + "/out.txt"
        let pid = try GameLauncher.spawn(
            "./bin/game", [out, "two words"], in: folder, environment: ["PATH": "/usr/bin:/bin"],
            throughShell: throughShell)
        #expect(try GameLauncher.wait(for: pid, "./bin/game") == 7, "the game's exit status is passed on")
        let lines = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(lines == [folder, "two words"])
        #expect(throws: PatchSyncError.self, "a missing command is named, not passed on as the shell's 127") {
            try GameLauncher.spawn("./bin/missing", [], in: folder, environment: [:], throughShell: throughShell)
        }
    }
}
