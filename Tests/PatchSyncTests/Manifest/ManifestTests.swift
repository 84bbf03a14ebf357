import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("The build manifest")
struct ManifestTests {
    static var repoRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().path
    }

    @Test(
        "what publish writes validates against manifests/manifest.schema.json (python jsonschema)",
        .tags(.medium))
    func schema() throws {
        let fixture = try Fixture()
        try fixture.publish(try fixture.sampleBuild(1, scale: 0.005), id: "1.4.2+873")
        let dir = fixture.origin + "/targets/manifests/live"
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: dir).first)
        let manifest = try Manifest.decode(try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name)), what: name)
        let json = fixture.directory + "/manifest.json"
        try manifest.json().write(to: URL(fileURLWithPath: json))
        for document in [json, Self.repoRoot + "/manifests/example.manifest.json"] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [
                "python3", "-c",
                """
                import json, sys, jsonschema
                schema = json.load(open(sys.argv[1]))
                jsonschema.Draft202012Validator.check_schema(schema)
                jsonschema.validate(json.load(open(sys.argv[2])), schema)
                """, Self.repoRoot + "/manifests/manifest.schema.json", document
            ]
            try process.run()
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "\(document) does not validate against the schema")
        }
        #expect(manifest.files.count > 100)
        #expect(manifest.files.allSatisfy { !$0.chunks.isEmpty || $0.size == 0 })
    }

    @Test(
        "paths that escape the install are refused",
        .tags(.small), arguments: ["../evil", "/etc/passwd", "a/../../b", "a//b", "./a", "a\\b", ""])
    func unsafePaths(path: String) {
        #expect(throws: PatchSyncError.self) { try Manifest.checkPath(path) }
    }

    /// A manifest of one 10-byte file "a" stored as one chunk of `objectLength` bytes in `codec`.
    private static func oneFile(format: Int, codec: ChunkCodec, objectLength: Int) throws -> Manifest {
        let chunk = ChunkEntry(
            offset: 0, length: 10, sha256: SHA256Digest.of(Data()), objectOffset: 0, objectLength: objectLength,
            codec: codec)
        let file = FileEntry(
            path: "a", size: 10, mode: 0o644, sha256: SHA256Digest.of(Data()),
            object: SHA256Digest.of(Data()), bundle: "base", chunks: [chunk])
        return Manifest(
            formatVersion: format, buildId: try BuildID("1"), channel: .live, sequence: 1,
            chunking: .standard, bundles: [.base], files: [file])
    }

    @Test("zstd chunks need format 5, and a format this client does not know is refused by number", .tags(.small))
    func formatVersions() throws {
        var manifest = try Self.oneFile(format: 4, codec: .zstd, objectLength: 9)
        let old = #expect(throws: PatchSyncError.self) { try manifest.validate() }
        #expect(old?.message.contains("zstd") == true, "\(old?.message ?? "")")
        manifest.formatVersion = 5
        try manifest.validate()
        manifest.formatVersion = Manifest.formatVersion + 1
        let newer = #expect(throws: PatchSyncError.self) { try manifest.validate() }
        #expect(
            newer?.message.contains("format version \(Manifest.formatVersion + 1)") == true, "\(newer?.message ?? "")")
        #expect(newer?.remedy?.contains("update PatchSync") == true)
    }

    @Test(
        "a chunk in another object than its file's needs format 7 (a client of 6 would read it from the file's object), and never names a sealed object",
        .tags(.small))
    func chunkObjects() throws {
        var manifest = try Self.oneFile(format: 6, codec: .zstd, objectLength: 9)
        let elsewhere = SHA256Digest.of(Data("an earlier build's object".utf8))
        manifest.files[0].chunks[0].object = elsewhere
        let old = #expect(throws: PatchSyncError.self) { try manifest.validate() }
        #expect(
            old?.message.contains("format version 6") == true && old?.message.contains("7") == true,
            "\(old?.message ?? "")")
        manifest.formatVersion = 7
        try manifest.validate()
        #expect(manifest.files[0].objects == [elsewhere] && !manifest.files[0].isWhole)
        manifest.sealed = [
            SealedObject(
                object: elsewhere, sealed: SHA256Digest.of(Data("sealed".utf8)), length: 9 + 16, keyBuild: "1",
                units: [9])
        ]
        let sealed = #expect(throws: PatchSyncError.self) { try manifest.validate() }
        #expect(sealed?.message.contains("sealed") == true, "\(sealed?.message ?? "")")
    }

    @Test(
        "a delta pack rebuilds a file from another path only from format 8 (a client of 7 would look for its source at its own path), and only from a safe path",
        .tags(.small))
    func movedSources() throws {
        var manifest = try Self.oneFile(format: 7, codec: .zstd, objectLength: 9)
        manifest.deltas = [
            DeltaSource(
                from: try BuildID("0"), object: SHA256Digest.of(Data("pack".utf8)), length: 10, files: 1,
                covers: [0], moved: [manifest.files[0].path: "old/" + manifest.files[0].path])
        ]
        #expect(throws: PatchSyncError.self, "format 7 has no moved sources") { try manifest.validate() }
        manifest.formatVersion = 8
        try manifest.validate()
        manifest.deltas?[0].moved = [manifest.files[0].path: "../outside"]
        let escaping = #expect(throws: PatchSyncError.self) { try manifest.validate() }
        #expect(escaping?.message.contains("source path") == true, "\(escaping?.message ?? "")")
    }

    @Test(
        "a delta pack's list of the files it rebuilds must name as many files as it says, ascending, each in the manifest",
        .tags(.small))
    func deltaCovers() throws {
        var manifest = try Self.oneFile(format: 1, codec: .raw, objectLength: 10)
        for name in ["b", "c"] {  // three files: every rule has room to be broken alone
            var file = manifest.files[0]
            file.path = name
            manifest.files.append(file)
        }
        let pack = DeltaSource(
            from: try BuildID("0"), object: manifest.files[0].object, length: 100, files: 2, covers: [0, 2])
        manifest.deltas = [pack]
        try manifest.validate()
        for wrong in [[2, 0], [1, 1], [0, 3], [-1, 0]] {
            manifest.deltas?[0].covers = wrong
            #expect(throws: PatchSyncError.self, "covers \(wrong)") { try manifest.validate() }
        }
        manifest.deltas?[0].covers = [0, 1, 2]
        #expect(throws: PatchSyncError.self, "covers three files, files says two") { try manifest.validate() }
        manifest.deltas?[0].covers = nil
        try manifest.validate()
        // Narrowed to some bundles, the indices follow the files that stay.
        manifest.deltas?[0].covers = [0, 2]
        manifest.files[1].bundle = "hd"
        manifest.bundles.append(PatchSync.Bundle(name: "hd", required: false, priority: 1, paths: ["b"]))
        let narrowed = manifest.selecting([manifest.bundles[0].name])
        #expect(narrowed.files.map(\.path) == [manifest.files[0].path, "c"])
        #expect(narrowed.deltas?[0].covers == [0, 1] && narrowed.deltas?[0].narrowed == [0: 0, 2: 1])
        try narrowed.validate()
    }

    @Test("a manifest with special mode bits or chunks that do not tile the file is refused", .tags(.small))
    func malformed() throws {
        var manifest = try Self.oneFile(format: 1, codec: .raw, objectLength: 10)
        let file = manifest.files[0]
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

@Suite("Symbolic links in a manifest", .tags(.small))
struct LinkResolverTests {
    func resolver(_ links: [String: String]) -> LinkResolver { LinkResolver(targets: links) }

    @Test("a link stays inside only when following it and every link on its way never climbs above the root")
    func resolution() {
        let r = resolver([
            "lib/a.so": "a.so.1", "data/shared": "../assets", "data/tex": "shared/x.dds",
            "sub/up": "..", "q": "sub/up/..", "loop1": "loop2", "loop2": "loop1", "abs": "/etc/passwd",
            "deep/out": "../../x"
        ])
        #expect(
            r.staysInside("lib/a.so") && r.staysInside("data/shared") && r.staysInside("data/tex")
                && r.staysInside("sub/up"))
        #expect(!r.staysInside("q"), "sub/up is the root, so sub/up/.. is above it")
        #expect(!r.staysInside("loop1"), "a loop is refused after 40 hops")
        #expect(!r.staysInside("abs") && !r.staysInside("deep/out"))
    }

    @Test("a client refuses a manifest whose link escapes, or that puts a file below a link")
    func refusals() throws {
        func manifest(links: [LinkEntry], files: [String] = []) throws -> Manifest {
            Manifest(
                formatVersion: 3, buildId: try BuildID("1"), channel: .live, sequence: 1, chunking: .standard,
                bundles: [.base],
                files: files.map {
                    FileEntry(
                        path: $0, size: 0, mode: 0o644, sha256: SHA256Hasher.hash(Data()),
                        object: SHA256Hasher.hash(Data()),
                        bundle: "base", chunks: [])
                }, links: links)
        }
        #expect(throws: PatchSyncError.self) {
            try manifest(links: [LinkEntry(path: "x", target: "../y", bundle: "base")]).validate()
        }
        #expect(throws: PatchSyncError.self) {
            try manifest(links: [LinkEntry(path: "d", target: "e", bundle: "base")], files: ["d/f"]).validate()
        }
        try manifest(links: [LinkEntry(path: "d", target: "e", bundle: "base")], files: ["e/f"]).validate()
    }
}

@Suite("Bundle selection and download order", .tags(.small))
struct BundleSelectionTests {
    static let bundles = [
        Bundle(name: "dlc", required: false, priority: 5, paths: ["dlc/**"]),
        Bundle(name: "fr", required: false, priority: 1, paths: ["fr/**"]),
        Bundle(name: "de", required: false, priority: 1, paths: ["de/**"]),
        Bundle(name: "core", required: true, priority: 9, paths: ["**"])
    ]

    static func manifest() throws -> Manifest {
        Manifest(
            formatVersion: 1, buildId: try BuildID("1"), channel: .live, sequence: 1, chunking: .standard,
            bundles: bundles, files: [])
    }

    @Test(
        "required bundles first whatever their priority, then optional ones by priority, ties in the bundles file's order"
    )
    func order() {
        #expect(BundleSelection.downloadOrder(Self.bundles).map(\.name) == ["core", "fr", "de", "dlc"])
        #expect(BundleSelection.ranks(Self.bundles) == ["core": 0, "fr": 1, "de": 2, "dlc": 3])
    }

    @Test(
        "a selection stages the required part first, then one more optional bundle each; bundles already whole on disk join the first; a chosen bundle the build lacks is dropped"
    )
    func steps() throws {
        let selection = BundleSelection(try Self.manifest(), chosen: ["dlc", "fr", "voices-jp"])
        #expect(selection.wanted == ["core", "fr", "dlc"] && selection.dropped == ["voices-jp"])
        #expect(selection.steps { _ in false } == [["core"], ["core", "fr"], ["core", "fr", "dlc"]])
        #expect(selection.steps { $0 == "dlc" } == [["core", "dlc"], ["core", "fr", "dlc"]])
        #expect(
            BundleSelection(try Self.manifest(), chosen: nil).wanted == ["core", "fr", "de", "dlc"],
            "no choice: every bundle")
        #expect(BundleSelection(try Self.manifest(), chosen: []).steps { _ in false } == [["core"]])
    }
}
