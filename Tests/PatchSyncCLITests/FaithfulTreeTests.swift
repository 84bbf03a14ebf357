import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// Every entry of a tree, read without following any link: "file MODE SHA", "link TARGET" or "folder".
/// Installs are read-only by design, so a file's mode is compared without its write bits.
func treeListing(_ root: String) throws -> [String: String] {
    var listing: [String: String] = [:]
    func walk(_ relative: String) throws {
        let full = relative.isEmpty ? root : root + "/" + relative
        for name in try FileManager.default.contentsOfDirectory(atPath: full) {
            let rel = relative.isEmpty ? name : relative + "/" + name
            var st = stat()
            guard lstat(root + "/" + rel, &st) == 0 else { throw CocoaError(.fileReadUnknown) }
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                listing[rel] = "folder"
                try walk(rel)
            case S_IFLNK:
                listing[rel] = "link " + (try FileManager.default.destinationOfSymbolicLink(atPath: root + "/" + rel))
            default:
                let mode = String(UInt32(st.st_mode) & 0o555, radix: 8)
                listing[rel] = "file \(mode) " + (try SHA256Digest.of(file: root + "/" + rel).hex)
            }
        }
    }
    try walk("")
    return listing
}

@Suite("A faithful tree: modes, empty folders and symbolic links", .tags(.cli))
struct FaithfulTreeTests {
    static func write(_ text: String, _ path: String, mode: Int16 = 0o644) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
    }

    static func link(_ path: String, _ target: String) throws {
        try FileManager.default.createSymbolicLink(atPath: path, withDestinationPath: target)
    }

    /// Build 1: links inside (a library alias, a shared folder, a chain through a link), an empty
    /// folder, two files with the same bytes and different modes.
    static func buildOne(_ dir: String) throws {
        try write("#!/bin/sh\necho run\n", dir + "/run.sh")
        try write("lib one", dir + "/lib/libfoo.so.1")
        try link(dir + "/lib/libfoo.so", "libfoo.so.1")
        try write("texture", dir + "/assets/tex.dds")
        try FileManager.default.createDirectory(atPath: dir + "/data", withIntermediateDirectories: true)
        try link(dir + "/data/shared", "../assets")
        try link(dir + "/data/tex", "shared/tex.dds")
        try FileManager.default.createDirectory(atPath: dir + "/editor/maps", withIntermediateDirectories: true)
        try write("same bytes", dir + "/same.txt", mode: 0o644)
        try write("same bytes", dir + "/same.sh", mode: 0o755)
    }

    func install(_ fixture: Fixture, _ install: Install, equals build: String, _ label: String) throws {
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        let current = install.root + "/current/"
        #expect(
            try treeListing(current) == treeListing(build),
            "\(label): install equals its build, links and modes included")
        let diff = try CLI.runProgram("/usr/bin/diff", ["-r", "--no-dereference", build + "/", current])
        #expect(diff.status == 0, "\(label): diff -r --no-dereference: \(diff.stdout)")
        let verify = try CLI.run(["verify", "--full", "--install", install.root, "--json"])
        #expect(
            verify.status == 0 && verify.stdout.contains("\"damaged\":[]"),
            "\(label): \(verify.stdout) \(verify.stderr)")
        var a = stat(), b = stat()
        #expect(lstat(current + "same.txt", &a) == 0 && lstat(current + "same.sh", &b) == 0)
        #expect(a.st_ino != b.st_ino, "\(label): same bytes, different modes: two inodes")
    }

    @Test(
        "links inside the build, empty folders, a mode-only change and same-content files of two modes install as the build holds them; verify and repair know links and folders"
    )
    func faithful() throws {
        let fixture = try Fixture()
        let one = fixture.directory + "/b1", two = fixture.directory + "/b2"
        try Self.buildOne(one)
        try fixture.publish(one, id: "1")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        try self.install(fixture, install, equals: one, "build 1")

        // Build 2: run.sh only gains +x; the library link moves to a new file; an empty folder goes, another comes.
        _ = try CLI.runProgram("/bin/cp", ["-a", one, two])
        try FileManager.default.setAttributes([.posixPermissions: Int16(0o755)], ofItemAtPath: two + "/run.sh")
        try Self.write("lib two", two + "/lib/libfoo.so.2")
        try FileManager.default.removeItem(atPath: two + "/lib/libfoo.so")
        try Self.link(two + "/lib/libfoo.so", "libfoo.so.2")
        try FileManager.default.removeItem(atPath: two + "/editor/maps")
        try FileManager.default.createDirectory(atPath: two + "/saves", withIntermediateDirectories: true)
        try fixture.publish(two, id: "2")
        let diff = try CLI.run(["diff", install.root, two, "--json"])
        #expect(
            diff.status == 0 && diff.stdout.contains("\"path\":\"run.sh\"")
                && diff.stdout.contains("lib/libfoo.so -> libfoo.so.2")
                && diff.stdout.contains("editor/maps/") && diff.stdout.contains("saves/"),
            "diff sees the mode and the entries: \(diff.stdout)")
        try self.install(fixture, install, equals: two, "build 2")

        // A player's hands: a link retargeted, an empty folder removed. verify names both; repair puts them back.
        let current = install.root + "/current"
        try FileManager.default.removeItem(atPath: current + "/lib/libfoo.so")
        try Self.link(current + "/lib/libfoo.so", "libfoo.so.1")
        try FileManager.default.removeItem(atPath: current + "/saves")
        let damaged = try CLI.run(["verify", "--install", install.root, "--json"])
        #expect(
            damaged.stdout.contains("\"problem\":\"wrongLink\"") && damaged.stdout.contains("\"path\":\"saves\""),
            "\(damaged.stdout)")
        #expect(damaged.status != 0)
        let repair = try CLI.run(["verify", "--repair", "--now", "--install", install.root])
        #expect(repair.status == 0, "\(repair.stdout) \(repair.stderr)")
        #expect(try treeListing(current + "/") == treeListing(two), "repair restores links and folders")
    }

    @Test(
        "a link that escapes the build, absolutely or through a chain of links, is refused at publish with its path; --dereference-external copies what it points to"
    )
    func escaping() throws {
        let fixture = try Fixture()
        let build = fixture.directory + "/b", outside = fixture.directory + "/outside"
        try Self.buildOne(build)
        try Self.write("font bytes", outside + "/fonts/Sans.ttf")
        try Self.write("license", outside + "/COPYING")
        let keys = [
            "--targets-key", fixture.keyDirectory + "/targets.key", "--online-key", fixture.keyDirectory + "/online.key"
        ]
        func publish(_ id: String, _ extra: [String] = []) throws -> CLI.Result {
            try CLI.run(["publish", build, "--origin", fixture.origin, "--build-id", id] + keys + extra)
        }
        // A chain that climbs out although each link alone reads as inside: sub/up -> .. ; q -> sub/up/..
        try FileManager.default.createDirectory(atPath: build + "/sub", withIntermediateDirectories: true)
        try Self.link(build + "/sub/up", "..")
        try Self.link(build + "/q", "sub/up/..")
        let chain = try publish("1")
        #expect(
            chain.status == 64 && chain.stderr.contains("/q is a symbolic link")
                && chain.stderr.contains("--dereference-external"),
            "\(chain.stderr)")
        try FileManager.default.removeItem(atPath: build + "/q")

        try Self.link(build + "/COPYING", outside + "/COPYING")  // absolute, as Debian links fonts
        try Self.link(build + "/fonts", "../outside/fonts")  // relative, escaping
        let refused = try publish("1")
        #expect(refused.status == 64 && refused.stderr.contains("/COPYING is a symbolic link"), "\(refused.stderr)")
        let copied = try publish("1", ["--dereference-external"])
        #expect(copied.status == 0, "\(copied.stderr)")
        let install = try fixture.makeInstall(remotes: [fixture.fileRemote])
        #expect(try CLI.run(["sync", "--install", install.root]).status == 0)
        #expect(try CLI.run(["apply", "--install", install.root]).status == 0)
        let listing = try treeListing(install.root + "/current/")
        #expect(
            listing["COPYING"]?.hasPrefix("file 444") == true && listing["fonts"] == "folder"
                && listing["fonts/Sans.ttf"]?.hasPrefix("file 444") == true && listing["sub/up"] == "link ..",
            "copies of what escaping links point to; inside links kept: \(listing)")
        try FileManager.default.removeItem(atPath: build + "/sub/up")  // diff -r would loop through it
        try FileManager.default.removeItem(atPath: install.root + "/current/sub/up")
        let diff = try CLI.runProgram("/usr/bin/diff", ["-r", build + "/", install.root + "/current/"])
        #expect(diff.status == 0, "the same bytes through the links: \(diff.stdout)")
    }
}
