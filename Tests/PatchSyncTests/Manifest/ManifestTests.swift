import Foundation
@testable import PatchSync
import PatchSyncTestSupport
import Testing

@Suite("The build manifest")
struct ManifestTests {
    static var repoRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().path
    }

    @Test("what publish writes validates against manifests/manifest.schema.json (python jsonschema)",
          .tags(.medium))
    func schema() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.005), id: "1.4.2+873")
        let dir = fixture.origin + "/targets/manifests/live"
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: dir).first)
        let manifest = try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name)), what: name)
        let json = fixture.directory + "/manifest.json"
        try manifest.encoded().write(to: URL(fileURLWithPath: json))
        for document in [json, Self.repoRoot + "/manifests/example.manifest.json"] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", "-c", """
                import json, sys, jsonschema
                schema = json.load(open(sys.argv[1]))
                jsonschema.Draft202012Validator.check_schema(schema)
                jsonschema.validate(json.load(open(sys.argv[2])), schema)
                """, Self.repoRoot + "/manifests/manifest.schema.json", document]
            try process.run()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(document) does not validate against the schema")
        }
        #expect(manifest.files.count > 100)
        #expect(manifest.files.allSatisfy { !$0.chunks.isEmpty || $0.size == 0 })
    }

    @Test("paths that escape the install are refused",
          .tags(.small), arguments: ["../evil", "/etc/passwd", "a/../../b", "a//b", "./a", "a\\b", ""])
    func unsafePaths(path: String) {
        #expect(throws: PatchSyncError.self) { try Manifest.checkPath(path) }
    }

    @Test("a manifest with special mode bits or chunks that do not tile the file is refused", .tags(.small))
    func malformed() throws {
        let chunk = ChunkEntry(offset: 0, length: 10, sha256: SHA256Digest.of(Data()), objectOffset: 0,
                               objectLength: 10, codec: .raw)
        let file = FileEntry(path: "a", size: 10, mode: 0o644, sha256: SHA256Digest.of(Data()),
                             object: SHA256Digest.of(Data()), bundle: "base", chunks: [chunk])
        var manifest = Manifest(formatVersion: 1, buildId: try BuildID("1"), channel: .live, sequence: 1,
                                chunking: .standard, bundles: [.base], files: [file])
        try manifest.validate()
        manifest.files[0].mode = 0o4755
        #expect(throws: PatchSyncError.self) { try manifest.validate() }
        manifest.files[0].mode = 0o644
        manifest.files[0].size = 11
        #expect(throws: PatchSyncError.self) { try manifest.validate() }
        manifest.files[0].size = 10
        manifest.files[0].mode = 0o646
        #expect(throws: PatchSyncError.self) { try manifest.validate() }
        manifest.files[0].mode = 0o644
        manifest.files.append(file)
        #expect(throws: PatchSyncError.self) { try manifest.validate() }
        manifest.files[1].path = "A"
        #expect(throws: PatchSyncError.self, "paths that differ only in case collide on case-insensitive disks") {
            try manifest.validate()
        }
        manifest.files[1].path = "b"
        try manifest.validate()
    }

    @Test("bundle globs: * stays in a folder, ** crosses folders", .tags(.small))
    func globs() {
        #expect(Glob.matches("**", "a/b/c.png"))
        #expect(Glob.matches("maps/forest/**", "maps/forest/x/y.map"))
        #expect(!Glob.matches("maps/*.map", "maps/forest/y.map"))
        #expect(Glob.matches("maps/*.map", "maps/y.map"))
        #expect(Glob.matches("**/*.ogg", "audio/de/line.ogg"))
        #expect(!Glob.matches("audio/?.ogg", "audio/ab.ogg"))
    }
}
