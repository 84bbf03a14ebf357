import Foundation
import PatchSync
import PatchSyncCLI
import PatchSyncTestSupport
import Testing

/// The keys of each verb's `--json` object, pinned here so that review sees them: launchers, schedulers and
/// publishing scripts read these objects, so a key added, renamed or dropped must be a visible change.
/// Values are not pinned (the verbs' own tests check them). Every verb here runs without a network.
@Suite("JSON shapes", .tags(.cli))
struct JSONShapeTests {
    /// The keys of the result (the last line) of each publisher verb with `--json`.
    static let publisher: [String: Set<String>] = [
        "keygen": ["onlineKey", "rootKey", "targetsKey"],
        "keygen --role root": ["rootKey"],
        "repo init": ["origin", "root"],
        "publish": [
            "alreadyPublished", "buildId", "channel", "deltas", "dryRun", "files", "manifestTarget",
            "objectBytesWritten",
            "excluded", "objectsWritten", "relistedPreloads", "sequence", "totalBytes", "warnings",
            "reusedChunks", "reusedChunkBytes", "consolidatedFiles"
        ],
        "repo promote": [
            "alreadyCurrent", "buildId", "channel", "deltas", "manifestTarget", "promotedFrom", "sequence", "warnings"
        ],
        "repo rollback": [
            "alreadyCurrent", "buildId", "channel", "deltas", "manifestTarget", "rollback", "sequence", "warnings"
        ],
        "repo withdraw": ["buildId", "channel", "wasPreload", "warnings"],
        "repo status": ["channels", "origin", "roles"],
        "repo check": ["builds", "due", "ok", "origin"],
        "repo refresh": ["failed", "missingKeys", "origin", "refreshed", "released", "warnings"],
        "repo renew": ["origin", "renewed"],
        "repo prune --dry-run": [
            "bytesFreed", "dryRun", "graceSeconds", "held", "listed", "origin", "removed", "unlisted", "warnings"
        ],
        "diff": ["bundles", "entries", "files", "folders", "metadataBytes", "new", "old", "removed", "total"],
        "repo rotate-root": ["hosts", "origin", "root", "rootVersion"],
        "manifest show --files": [
            "buildId", "bundles", "bytes", "channel", "chunks", "chunksElsewhere", "deltas", "fileList", "files",
            "folders", "formatVersion", "links", "mostRanges", "mostRangesFile", "objects", "sequence", "storedBytes"
        ]
    ]

    /// The keys of the result (the last line) of each player verb with `--json`.
    static let player: [String: Set<String>] = [
        "init": ["builds", "channel", "install", "remotes"],
        "status (fresh install)": ["builds", "channel", "install", "remotes"],
        "sync": [
            "buildBytes", "buildId", "bundles", "bytesFromLocal", "bytesFromOrigin", "bytesFromPeers",
            "bytesFromPreload", "bytesPlanned",
            "bytesReceived", "chunksCopiedLocally", "chunksFetched",
            "deltaBytes", "deltaFallbacks", "deploymentsStaged", "droppedBundles", "filesAssembled", "filesLinked",
            "filesPatched", "outcome", "requests", "sequence"
        ],
        "bundles": ["buildId", "bundles", "dropped", "playable"],
        "apply": ["applied", "current", "milliseconds"],
        "verify": ["applied", "buildId", "damaged", "deployment", "entriesChecked", "filesChecked", "filesHashed"],
        "status (installed)": [
            "builds", "bundles", "channel", "current", "install", "liveEmptyFolders", "liveLinks", "remotes",
            "seenSequence"
        ],
        "status --disk": [
            "builds", "bundles", "channel", "current", "install", "liveEmptyFolders", "liveLinks", "remotes",
            "seenSequence", "stagingDiskBytes"
        ],
        "launch": ["exitStatus"],
        "rollback": ["applied", "current"],
        "bundles remove": ["excluded", "unknown"],
        "error": ["code", "error", "exitStatus", "hint"],
        "error (parser)": ["code", "error", "exitStatus", "hint"]
    ]

    /// Every key a progress event line (the lines before the result) may have; `event` and `message` always.
    static let eventKeys: Set<String> = [
        "bundles", "bytesDone", "bytesPerSecond", "bytesTotal", "etaSeconds", "event",
        "filesDone", "filesTotal", "message", "preload", "time", "phase",
        "stepBytesDone", "stepBytesTotal", "downloading", "bundleBytesDone", "bundleBytesTotal", "bundleInstalledBytes",
        "applied", "current", "skipped", "mirror", "attempt", "retryInSeconds"
    ]

    /// The keys every line has besides its own: what it is, when, and the step it comes from (and on a
    /// result or an error, the command).
    static let envelope: Set<String> = ["event", "time", "phase", "command"]

    @Test(
        "the publisher verbs' --json objects keep their keys: keygen, repo init, publish, promote, rollback, withdraw, status, check, refresh, renew, prune, diff, rotate-root"
    )
    func publisherVerbs() throws {
        let fixture = try Fixture()  // its folder and sample builds; the keys and origin here are the CLI's own
        let keys = fixture.directory + "/cli-keys", origin = fixture.directory + "/cli-origin"
        let signing = ["--targets-key", keys + "/targets.key", "--online-key", keys + "/online.key"]
        let build1 = try fixture.sampleBuild(1, scale: 0.002), build2 = try fixture.sampleBuild(2, scale: 0.002)
        var shapes = JSONShapes(expected: Self.publisher)
        try shapes.check("keygen", ["keygen", "--out", keys, "--json"])
        try shapes.check(
            "repo init", ["repo", "init", "--origin", origin, "--root-key", keys + "/root.key"] + signing + ["--json"])
        try shapes.check("publish", ["publish", build1, "--origin", origin, "--build-id", "1", "--json"] + signing)
        let beta = try CLI.run(
            ["publish", build2, "--origin", origin, "--build-id", "2", "--channel", "beta"] + signing)
        #expect(beta.status == 0, "\(beta.stderr)")
        try shapes.check(
            "repo promote",
            ["repo", "promote", "2", "--from", "beta", "--to", "live", "--origin", origin, "--json"] + signing)
        try shapes.check(
            "repo rollback", ["repo", "rollback", "--channel", "live", "--origin", origin, "--json"] + signing)
        try shapes.check(
            "repo withdraw", ["repo", "withdraw", "2", "--channel", "beta", "--origin", origin, "--json"] + signing)
        try shapes.check("repo status", ["repo", "status", "--origin", origin, "--json"])
        try shapes.check("repo check", ["repo", "check", "--origin", origin, "--json"])
        try shapes.check(
            "repo refresh", ["repo", "refresh", "--origin", origin, "--online-key", keys + "/online.key", "--json"])
        try shapes.check("repo renew", ["repo", "renew", "--origin", origin, "--json"] + signing)
        try shapes.check(
            "repo prune --dry-run", ["repo", "prune", "--origin", origin, "--keep", "10", "--dry-run", "--json"])
        try shapes.check("diff", ["diff", build1, build2, "--json"])
        try shapes.check("manifest show --files", ["manifest", "show", build2, "--files", "--json"])
        let newRoot = fixture.directory + "/new-root"
        try shapes.check("keygen --role root", ["keygen", "--out", newRoot, "--role", "root", "--json"])
        try shapes.check(
            "repo rotate-root",
            [
                "repo", "rotate-root", "--origin", origin, "--root-key", keys + "/root.key",
                "--new-root-key", newRoot + "/root.key", "--json"
            ])
        shapes.expectEveryRowChecked()
    }

    @Test(
        "the player verbs' --json objects keep their keys: init, status, sync, bundles, apply, verify, launch, rollback, and the error object"
    )
    func playerVerbs() throws {
        let fixture = try Fixture.published()
        let install = fixture.directory + "/game"
        var shapes = JSONShapes(expected: Self.player)
        try shapes.check(
            "init",
            ["init", "--install", install, "--remote", fixture.fileRemote, "--root", fixture.rootMetadata, "--json"])
        try shapes.check("status (fresh install)", ["status", "--install", install, "--json"])
        try shapes.check("sync", ["sync", "--install", install, "--json"])
        try shapes.check("bundles", ["bundles", "--install", install, "--json"])
        try shapes.check("apply", ["apply", "--install", install, "--json"])
        try shapes.check("verify", ["verify", "--install", install, "--json"])
        try shapes.check("status (installed)", ["status", "--install", install, "--json"])
        try shapes.check("status --disk", ["status", "--install", install, "--disk", "--json"])
        try fixture.publish(try fixture.sampleBuild(2, scale: 0.002), id: "2")
        let sync = try CLI.run(["sync", "--install", install])
        #expect(sync.status == 0, "\(sync.stderr)")
        // The game owns stdout: launch's lines go to the descriptor given (here stdout, to be read).
        try shapes.check("launch", ["launch", "--install", install, "--json", "--events-fd", "1", "--", "/bin/true"])
        try shapes.check("rollback", ["rollback", "--install", install, "--json"])
        try shapes.check("bundles remove", ["bundles", "remove", "voices-fr", "--install", install, "--json"])
        try shapes.check("error", ["status", "--install", fixture.directory, "--json"], status: ExitStatus.usage)
        try shapes.check(
            "error (parser)", ["sync", "--install", install, "--no-such-option", "--json"], status: ExitStatus.usage)
        shapes.expectEveryRowChecked()
    }
}

/// Runs verbs with `--json` and compares the keys of what they print with a table: the last line is the
/// result (its keys exactly the row's), every line before it a progress event.
struct JSONShapes {
    let expected: [String: Set<String>]
    private var checked: Set<String> = []

    init(expected: [String: Set<String>]) { self.expected = expected }

    mutating func check(
        _ row: String, _ arguments: [String], status: Int32 = 0,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        checked.insert(row)
        let result = try CLI.run(arguments)
        let command = "patchsync " + arguments.joined(separator: " ")
        #expect(
            result.status == status, "\(row): `\(command)` exited \(result.status): \(result.stderr)",
            sourceLocation: sourceLocation)
        // Every line validates against the one schema of JSON lines.
        let lines = FileManager.default.temporaryDirectory.path + "/shape-\(getpid())-\(UUID().uuidString).jsonl"
        try result.stdout.write(toFile: lines, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: lines) }
        let (valid, why) = try python(
            """
            import json, sys, jsonschema
            schema = json.load(open(sys.argv[1]))
            jsonschema.Draft202012Validator.check_schema(schema)
            lines = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
            for l in lines: jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(l)
            assert lines[-1]["event"] in ("result", "error"), lines[-1]
            for l in lines[:-1]: assert l["event"] not in ("result", "error"), l
            """, [DiffCLITests.repoRoot + "/manifests/events.schema.json", lines])
        #expect(
            valid == 0, "\(row): `\(command)` printed a line that fails manifests/events.schema.json: \(why)",
            sourceLocation: sourceLocation)
        var objects: [Set<String>] = []
        for line in result.stdout.split(separator: "\n") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
                Issue.record(
                    "\(row): `\(command)` printed a line that is no JSON object: \(line)",
                    sourceLocation: sourceLocation)
                return
            }
            let keys = Set(object.keys)
            #expect(
                keys.isSuperset(of: ["event", "time", "phase"]), "\(row): a line without the common keys: \(line)",
                sourceLocation: sourceLocation)
            objects.append(keys)
        }
        guard let last = objects.last else {
            Issue.record("\(row): `\(command)` printed nothing on stdout", sourceLocation: sourceLocation)
            return
        }
        for event in objects.dropLast() {
            #expect(
                event.isSuperset(of: ["event", "message"]) && event.isSubset(of: JSONShapeTests.eventKeys),
                "\(row): an event line has the keys \(event.sorted())", sourceLocation: sourceLocation)
        }
        let pinned = expected[row] ?? []
        let own = last.subtracting(JSONShapeTests.envelope)
        #expect(
            last.isSuperset(of: JSONShapeTests.envelope),
            "\(row): the result lacks \(JSONShapeTests.envelope.subtracting(last).sorted())",
            sourceLocation: sourceLocation)
        #expect(
            own == pinned,
            """
            \(row): the keys of `\(command)` are \(own.sorted()); \
            new: \(own.subtracting(pinned).sorted()), gone: \(pinned.subtracting(own).sorted())
            """, sourceLocation: sourceLocation)
    }

    /// Every row of the table was run: a row without a verb pins nothing.
    func expectEveryRowChecked(sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(
            Set(expected.keys) == checked, "rows never run: \(Set(expected.keys).subtracting(checked).sorted())",
            sourceLocation: sourceLocation)
    }
}
