import Foundation
@testable import PatchSync
import PatchSyncTestSupport
import Testing

/// python-tuf's ngclient (installed by `make test` into .venv-tuf) refreshes from an origin served by nginx
/// and downloads a target; prints "ok LENGTH" or fails.
func pythonTUF(origin: String, root: String, target: String, in directory: String) throws -> (Int32, String) {
    let venv = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path + "/.venv-tuf/bin/python"
    let meta = directory + "/tuf-meta-\(UUID().uuidString)", dl = directory + "/tuf-dl-\(UUID().uuidString)"
    try FileManager.default.createDirectory(atPath: meta, withIntermediateDirectories: true)
    try FileManager.default.createDirectory(atPath: dl, withIntermediateDirectories: true)
    try FileManager.default.copyItem(atPath: root, toPath: meta + "/root.json")
    let result = try CLI.runProgram(venv, ["-c", """
        import sys
        from tuf.ngclient import Updater
        origin, meta, dl, target = sys.argv[1:5]
        u = Updater(bootstrap=open(meta + "/root.json", "rb").read(), metadata_dir=meta,
                    metadata_base_url=origin + "/metadata/", target_base_url=origin + "/targets/", target_dir=dl)
        u.refresh()
        info = u.get_targetinfo(target)
        assert info is not None, f"{target} not found"
        u.download_target(info)
        print("ok", info.length, info.custom["sequence"])
        """, origin, meta, dl, target])
    return (result.status, result.stdout)
}

@Suite("Interop with python-tuf", .tags(.large))
struct InteropTests {
    @Test("python-tuf's client reads a repository that publish wrote, after repo refresh and after a root rotation")
    func pythonTUFReadsOurRepository() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1.0+1")
        let nginx = try NginxOrigin(root: fixture.origin)
        let shippedRoot = fixture.directory + "/shipped-root.json"
        try FileManager.default.copyItem(atPath: fixture.rootMetadata, toPath: shippedRoot)

        var (status, output) = try pythonTUF(origin: nginx.url, root: shippedRoot, target: "manifests/live/1.0+1.json.gz",
                                             in: fixture.directory)
        #expect(status == 0 && output.hasPrefix("ok "), "\(output)")

        var repo = try Repository.load(origin: fixture.origin)
        try repo.refresh(key: fixture.onlineKey)
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.003), id: "1.1+2")
        (status, output) = try pythonTUF(origin: nginx.url, root: shippedRoot, target: "manifests/live/1.1+2.json.gz",
                                         in: fixture.directory)
        #expect(status == 0 && output.hasPrefix("ok ") && output.contains(" 2"), "\(output)")

        try TrustTests.rotateRoot(fixture, signedByOldKey: true)
        (status, output) = try pythonTUF(origin: nginx.url, root: shippedRoot, target: "manifests/live/1.1+2.json.gz",
                                         in: fixture.directory)
        #expect(status == 0 && output.hasPrefix("ok "), "\(output)")
    }

    @Test("python-tuf refuses our repository when a signature is broken (the check is real on both sides)")
    func pythonTUFRefusesTampering() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.003), id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        let path = fixture.origin + "/metadata/timestamp.json"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        let sig = try #require(text.range(of: "\"sig\":\"")).upperBound
        text.replaceSubrange(sig...sig, with: text[sig] == "0" ? "1" : "0")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let (status, output) = try pythonTUF(origin: nginx.url, root: fixture.rootMetadata,
                                             target: "manifests/live/1.json.gz", in: fixture.directory)
        #expect(status != 0, "\(output)")
        #expect(output.contains("signature") || output.contains("Unsigned"), "\(output)")
    }
}
