import Foundation
import PatchSyncTestSupport
import Testing

/// The background examples a launcher engineer copies: they must stay valid.
@Suite("Background examples", .tags(.cli))
struct ExamplesTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../Examples/background").standardizedFileURL.path

    @Test(
        "`make demo`'s script runs end to end on the bundled sample with this build's binaries: publish, install, patch (with what it cost), preload and release, each tree byte-identical"
    )
    func demoRuns() throws {
        let script = URL(fileURLWithPath: Self.folder).deletingLastPathComponent().appendingPathComponent("demo.sh")
            .path
        let result = try CLI.runProgram("/bin/bash", [script, CLI.productsDirectory])
        #expect(result.status == 0, "\(result.stdout.suffix(2000))")
        for line in [
            "current/ is byte-identical to build 2", "downloaded for the patch:",
            "current/ is byte-identical to build 3"
        ] {
            #expect(result.stdout.contains(line), "\(line)")
        }
    }

    @Test(
        "the systemd services and timer pass systemd-analyze verify and ask for idle CPU and I/O; the share's runs `patchsync share` with options it accepts",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze")))
    func systemdUnits() throws {
        let fixture = try Fixture()
        let units = fixture.directory + "/units"
        try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: true)
        for name in ["patchsync-sync.service", "patchsync-sync.timer", "patchsync-share.service"] {
            var text = try String(contentsOfFile: Self.folder + "/" + name, encoding: .utf8)
            // verify checks that ExecStart exists: point it at the built binary.
            text = text.replacingOccurrences(of: "/usr/local/bin/patchsync", with: CLI.executable)
            try text.write(toFile: units + "/" + name, atomically: true, encoding: .utf8)
        }
        let result = try CLI.runProgram(
            "/usr/bin/systemd-analyze",
            [
                "verify", "--man=no", units + "/patchsync-sync.service", units + "/patchsync-sync.timer",
                units + "/patchsync-share.service"
            ])
        #expect(result.status == 0, "\(result.stdout)")
        // A misspelt key or value is only a warning ("…, ignoring"): one would silently drop a setting.
        #expect(!result.stdout.contains("ignoring") && !result.stdout.contains("Unknown"), "\(result.stdout)")
        let service = try String(contentsOfFile: Self.folder + "/patchsync-sync.service", encoding: .utf8)
        for line in [
            "IOSchedulingClass=idle", "CPUSchedulingPolicy=idle", "Nice=19", "SuccessExitStatus=75", "--discretionary"
        ] {
            #expect(service.contains(line), "\(line)")
        }
        let share = try String(contentsOfFile: Self.folder + "/patchsync-share.service", encoding: .utf8)
        let exec = try #require(share.split(separator: "\n").first { $0.hasPrefix("ExecStart=") })
        let arguments = exec.split(separator: " ").dropFirst().map(String.init).map {
            $0 == "%h/Games/forest" ? fixture.directory + "/game" : $0
        }
        let help = try CLI.run(arguments.filter { $0 != "--install" && $0 != fixture.directory + "/game" } + ["--help"])
        #expect(help.status == 0 && arguments.first == "share", "\(exec): \(help.stderr)")
        for option in arguments where option.hasPrefix("--") {
            #expect(help.stdout.contains(option), "\(option) is an option of share")
        }
        let timer = try String(contentsOfFile: Self.folder + "/patchsync-sync.timer", encoding: .utf8)
        #expect(timer.contains("Persistent=true") && timer.contains("RandomizedDelaySec="))
    }

    @Test("the cron line and the launcher hook call patchsync with options it accepts")
    func cronAndHook() throws {
        let cron = try String(contentsOfFile: Self.folder + "/crontab", encoding: .utf8)
        let line = try #require(cron.split(separator: "\n").first { !$0.hasPrefix("#") && !$0.isEmpty })
        #expect(line.split(separator: " ", omittingEmptySubsequences: true).count >= 6)
        let help = try CLI.run(["sync", "--help"])
        for option in ["--discretionary", "--for", "--quiet", "--install"] {
            #expect(line.contains(option) && help.stdout.contains(option), "\(option)")
        }
        let hook = try String(contentsOfFile: Self.folder + "/launch-game.sh", encoding: .utf8)
        #expect(hook.contains("patchsync launch --install"))
        #expect(FileManager.default.isExecutableFile(atPath: Self.folder + "/launch-game.sh"))
        #expect(try CLI.runProgram("/bin/sh", ["-n", Self.folder + "/launch-game.sh"]).status == 0)
    }
}
