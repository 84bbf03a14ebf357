import Foundation
import PatchSyncTestSupport
import Testing

/// A build folder's problems are all named at once, before anything is written, and names other systems
/// cannot hold are warned about (refused with --portable).
@Suite("Checking a build folder before publishing", .tags(.cli))
struct BuildFolderCheckTests {
    static func write(_ folder: String, _ files: [String: String], mode: [String: mode_t] = [:]) throws {
        for (path, text) in files {
            let full = folder + "/" + path
            try FileManager.default.createDirectory(
                atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(text.utf8).write(to: URL(fileURLWithPath: full))
            if let mode = mode[path] { chmod(full, mode) }
        }
    }

    static func objects(_ origin: String) -> [String] {
        ((try? FileManager.default.subpathsOfDirectory(atPath: origin + "/objects")) ?? []).filter {
            !$0.hasPrefix(".")
        }
    }

    @Test(
        "every refusal at once (names differing only in case, a link clashing in case with a folder, an unreadable mode), before any object is written"
    )
    func allRefusalsAtOnce() throws {
        let fixture = try Fixture()
        let build = fixture.directory + "/bad"
        try Self.write(
            build, ["Readme.txt": "a", "README.txt": "b", "data/map.bin": "m", "locked.bin": "secret"],
            mode: ["locked.bin": 0o000])
        try FileManager.default.createSymbolicLink(atPath: build + "/Data", withDestinationPath: "data")
        let before = Self.objects(fixture.origin)
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let result = try CLI.run(["publish", build, "--origin", fixture.origin, "--build-id", "9"] + keys)
        #expect(result.status == 64, "\(result.stderr)")
        for named in ["README.txt", "Readme.txt", "Data", "locked.bin: has mode 0", "3 problems", "nothing was written"]
        {
            #expect(result.stderr.contains(named), "\(named) not in: \(result.stderr)")
        }
        #expect(Self.objects(fixture.origin) == before, "objects were written for a refused build")
    }

    @Test(
        "names Windows or macOS cannot hold are warned about by name (text and --json) and published; --portable refuses them"
    )
    func unportableNames() throws {
        let fixture = try Fixture()
        let build = fixture.directory + "/names"
        try Self.write(build, ["CON.txt": "c", "a:b.dat": "d", "trailing.": "t", "fine.txt": "f"])
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let strict = try CLI.run(["publish", build, "--origin", fixture.origin, "--build-id", "1", "--portable"] + keys)
        #expect(strict.status == 64)
        #expect(
            strict.stderr.contains("CON.txt") && strict.stderr.contains("a:b.dat")
                && strict.stderr.contains("trailing."))
        let result = try CLI.run(["publish", build, "--origin", fixture.origin, "--build-id", "1", "--json"] + keys)
        #expect(result.status == 0, "\(result.stderr)")
        let report = try #require(
            result.stdout.split(separator: "\n").last.flatMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            })
        let warnings = (report["warnings"] as? [String]) ?? []
        #expect(warnings.contains { $0.hasPrefix("CON.txt: ") && $0.contains("reserved name on Windows") })
        #expect(warnings.contains { $0.hasPrefix("a:b.dat: ") })
        #expect(warnings.contains { $0.hasPrefix("trailing.: ") })
        #expect(!warnings.contains { $0.hasPrefix("fine.txt") })
    }

    @Test("what --dereference-external copies from outside the build is listed by path and source")
    func dereferencedIsListed() throws {
        let fixture = try Fixture()
        let build = fixture.directory + "/deref"
        try Self.write(build, ["game.bin": "g"])
        try Self.write(fixture.directory + "/system", ["font.ttf": "f"])
        try FileManager.default.createSymbolicLink(
            atPath: build + "/font.ttf", withDestinationPath: fixture.directory + "/system/font.ttf")
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        let result = try CLI.run(
            ["publish", build, "--origin", fixture.origin, "--build-id", "1", "--dereference-external"] + keys)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(
            result.stderr.contains("font.ttf: copied from ") && result.stderr.contains("system/font.ttf"),
            "\(result.stderr)")
    }

    @Test("a URL given as --origin is refused with where it belongs, and no folder named after it is created")
    func urlAsOrigin() throws {
        let fixture = try Fixture()
        let status = try CLI.run(["repo", "status", "--origin", "http://cdn.example/game"])
        #expect(
            status.status == 64 && status.stderr.contains("is a URL") && status.stderr.contains("s3://BUCKET/PREFIX"),
            "\(status.stderr)")
        let host = "cdn-\(UUID().uuidString).example"
        let created = try CLI.run([
            "repo", "init", "--origin", "https://\(host)/game", "--root-key", fixture.keyDirectory + "/root.key",
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ])
        #expect(created.status == 64, "\(created.stderr)")
        let named = FileManager.default.currentDirectoryPath + "/https:/" + host
        #expect(!FileManager.default.fileExists(atPath: named), "a folder named after the URL was created")
        try? FileManager.default.removeItem(atPath: named)
    }
}
