import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// The install holds against any sequence of operations: a seeded generator runs random sequences of
/// publishes (files, links, empty folders, mode changes, an optional bundle), plain, discretionary and
/// killed syncs, applies (with and without a game running), launches, bundle choices, rollbacks,
/// repairs and hand damage; a reference model written apart from the library (it knows builds only as
/// the folders it wrote) says after each step what must hold. A failure prints its seed and the
/// shortest sequence found that still fails.
///
/// `PATCHSYNC_MODEL_SEQUENCES` (default 96, over 4 shards; `make soak` runs 2,000) and `PATCHSYNC_MODEL_SEED` (default: a
/// fixed base, so CI is repeatable) set how much runs; run thousands locally with a random seed.
@Suite("The install against random sequences of operations", .tags(.cli))
struct InstallModelTests {
    static let shards = 4
    static var sequences: Int { Int(ProcessInfo.processInfo.environment["PATCHSYNC_MODEL_SEQUENCES"] ?? "") ?? 96 }
    static var baseSeed: UInt64 {
        UInt64(ProcessInfo.processInfo.environment["PATCHSYNC_MODEL_SEED"] ?? "") ?? 20261125
    }

    @Test(
        "the live tree is always one signed build's chosen selection, nothing outside the install changes, verify tells the truth, disk use stays bounded, no record points at missing content",
        arguments: 0..<shards)
    func randomSequences(shard: Int) throws {
        var ran = 0, steps = 0, liveChanges = 0, rollbacks = 0
        for index in stride(from: shard, to: Self.sequences, by: Self.shards) {
            let seed = Self.baseSeed &+ UInt64(index)
            let ops = ModelRun.generate(seed: seed)
            var run = try ModelRun(seed: seed)
            let failure = try run.run(ops)
            ran += 1
            steps += ops.count
            liveChanges += run.liveChanges
            rollbacks += run.rollbacks
            guard let failure else { continue }
            let shortest = try ModelRun.shrink(seed: seed, ops, failure: failure)
            Issue.record(
                """
                model test failed, seed \(seed) (PATCHSYNC_MODEL_SEED=\(Self.baseSeed) sequence \(index)): \(shortest.failure)
                shortest failing sequence (\(shortest.ops.count) of \(ops.count) steps):
                \(shortest.ops.map { (op: ModelOp) -> String in "  " + op.description }.joined(separator: "\n"))
                """)
            return
        }
        print(
            "model shard \(shard): \(ran) sequences, \(steps) steps (\(liveChanges) changes of the live build, "
                + "\(rollbacks) rollbacks), all invariants held")
        #expect(ran == 0 || liveChanges > 0, "no sequence ever changed the live build: the model checked nothing")
    }
}

/// One operation of a sequence.
enum ModelOp: CustomStringConvertible, Equatable {
    case publish, sync
    case syncKilled(delayMicroseconds: UInt32)
    case syncDiscretionary, apply, applyWhileGameRuns, launch
    /// sync then apply, as a player's update does.
    case update
    /// sync with the machine's clock moved by `days` (faketime).
    case syncClockMoved(days: Int)
    case rollback, bundlesAdd, bundlesRemove, repair
    case emptyStaging, deleteStaging, stagingFolderToLink
    case truncateLiveFile(pick: Int)
    case chmodLiveFile(pick: Int)
    case deletePreviousBuild
    /// One of the folders PatchSync rebuilds at will (staging, trash, delta packs, preload) replaced by a link to the canary.
    case stateFolderToLink(pick: Int)
    /// A link to the canary and a stray file planted in a staged folder.
    case plantStray
    /// sync or apply killed at a named transition (PATCHSYNC_CRASH_AT).
    case syncCrashed(point: String)
    case applyCrashed(point: String)
    static let syncPoints = ["stagingBegun", "batchWritten", "stagingFinished"]
    static let applyPoints = ["applyMoved", "applyFlipped", "applyRecorded", "retired"]

    static let stateFolders = ["staging", "trash", "deltas", "preload"]

    var description: String {
        switch self {
        case .publish: return "publish the next build"
        case .sync: return "sync"
        case .update: return "sync && apply"
        case .syncClockMoved(let days): return "sync with the clock moved \(days > 0 ? "+" : "")\(days) days"
        case .syncKilled(let delay): return "sync, SIGKILL after \(delay / 1000) ms"
        case .syncDiscretionary: return "sync --discretionary"
        case .apply: return "apply"
        case .applyWhileGameRuns: return "apply while the game runs"
        case .launch: return "launch -- /bin/true"
        case .rollback: return "rollback"
        case .bundlesAdd: return "bundles add hd"
        case .bundlesRemove: return "bundles remove hd"
        case .repair: return "verify --repair --now"
        case .emptyStaging: return "hand: empty every staged folder"
        case .deleteStaging: return "hand: delete .patchsync/staging"
        case .stagingFolderToLink: return "hand: swap a staged folder for a link to the canary"
        case .truncateLiveFile(let pick): return "hand: truncate live file #\(pick)"
        case .chmodLiveFile(let pick): return "hand: chmod live file #\(pick)"
        case .deletePreviousBuild: return "hand: delete the previous build's folder"
        case .stateFolderToLink(let pick):
            return
                "hand: replace .patchsync/\(ModelOp.stateFolders[pick % ModelOp.stateFolders.count]) by a link to the canary"
        case .plantStray: return "hand: plant a link to the canary and a stray file in a staged folder"
        case .syncCrashed(let point): return "sync, killed at \(point)"
        case .applyCrashed(let point): return "apply, killed at \(point)"
        }
    }
}

/// A deployment as the model knows it: which of its builds, with or without the optional bundle.
struct ModelDeployment: Hashable, CustomStringConvertible {
    var build: Int
    var hd: Bool
    var description: String { "build \(build)\(hd ? "+hd" : "")" }
}

/// A tree as seen on disk, without following links: files (hash and mode), links (target), folders.
struct ModelTree: Equatable {
    var files: [String: FileFacts] = [:]
    var links: [String: String] = [:]
    var folders: Set<String> = []

    /// Reads `root` (resolving only `root` itself).
    static func read(_ root: String) throws -> ModelTree {
        var tree = ModelTree()
        func walk(_ relative: String) throws {
            let folder = relative.isEmpty ? root : root + "/" + relative
            for name in try FileManager.default.contentsOfDirectory(atPath: folder) {
                let path = relative.isEmpty ? name : relative + "/" + name
                var st = stat()
                guard lstat(root + "/" + path, &st) == 0 else { continue }
                switch st.st_mode & S_IFMT {
                case S_IFDIR:
                    tree.folders.insert(path)
                    try walk(path)
                case S_IFLNK:
                    tree.links[path] = try FileManager.default.destinationOfSymbolicLink(atPath: root + "/" + path)
                default:
                    tree.files[path] = FileFacts(
                        sha256: try SHA256Digest.of(file: root + "/" + path).hex, mode: Int(st.st_mode & 0o7777))
                }
            }
        }
        try walk("")
        return tree
    }

    func differences(from other: ModelTree) -> [String] {
        let files = Set(self.files.keys).union(other.files.keys).filter { self.files[$0] != other.files[$0] }
        let links = Set(self.links.keys).union(other.links.keys).filter { self.links[$0] != other.links[$0] }
        let folders = self.folders.symmetricDifference(other.folders)
        return (files.sorted() + links.sorted().map { "link " + $0 } + folders.sorted().map { "folder " + $0 })
    }
}

/// A build folder the model wrote: content by path. `VERSION` and `hd/VERSION` name the build, so a
/// live tree tells which build and selection it is even when other files are damaged.
struct ModelBuild {
    var number: Int
    var files: [String: (bytes: [UInt8], mode: Int)] = [:]
    var links: [String: String] = [:]
    var folders: Set<String> = []

    static let filePool = [
        "bin/game", "data/a.dat", "data/b.dat", "data/sub/c.dat", "maps/m1.map", "readme.txt",
        "hd/tex1.bin", "hd/tex2.bin", "hd/sub/tex3.bin"
    ]
    static let linkPool = [
        ("data/latest", "a.dat"), ("maps/current", "m1.map"), ("hd/best", "tex1.bin"), ("top", "data")
    ]
    static let folderPool = ["empty", "data/empty", "hd/empty"]
    static let bundles = [
        PatchSync.Bundle(name: "hd", required: false, priority: 1, paths: ["hd/**"]),
        PatchSync.Bundle(name: "base", required: true, priority: 0, paths: ["**"])
    ]

    /// The next build: `previous` with files changed, added and removed, modes flipped, links and
    /// empty folders toggled.
    static func next(after previous: ModelBuild?, number: Int, rng: inout SeededRandom) -> ModelBuild {
        var build = previous ?? ModelBuild(number: number)
        build.number = number
        for path in filePool {
            let roll = rng.next() % 10
            if build.files[path] == nil {
                if previous == nil || roll < 3 { build.files[path] = (content(&rng), roll % 2 == 0 ? 0o755 : 0o644) }
            } else if roll < 2 {
                build.files[path] = nil
            } else if roll < 5 {
                build.files[path]?.bytes = content(&rng)
            } else if roll == 5 {
                build.files[path]?.mode ^= 0o111
            }
        }
        for (path, target) in linkPool where rng.next() % 4 == 0 {
            build.links[path] = build.links[path] == nil ? target : nil
        }
        for path in folderPool where rng.next() % 4 == 0 {
            if build.folders.remove(path) == nil { build.folders.insert(path) }
        }
        build.files["VERSION"] = (Array("\(number)\n".utf8), 0o644)
        build.files["hd/VERSION"] = (Array("\(number)+hd\n".utf8), 0o644)
        return build
    }

    private static func content(_ rng: inout SeededRandom) -> [UInt8] {
        switch rng.next() % 6 {
        case 0: return []
        case 1, 2: return rng.bytes(Int(rng.next() % 300) + 1)
        case 3, 4: return rng.bytes(Int(rng.next() % 6000) + 1000)
        default: return rng.bytes(Int(rng.next() % 200_000) + 60_000)
        }
    }

    func write(to folder: String) throws {
        let fm = FileManager.default
        for (path, file) in files {
            try fm.createDirectory(
                atPath: folder + "/" + (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try Data(file.bytes).write(to: URL(fileURLWithPath: folder + "/" + path))
            chmod(folder + "/" + path, mode_t(file.mode))
        }
        for (path, target) in links {
            try fm.createDirectory(
                atPath: folder + "/" + (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try fm.createSymbolicLink(atPath: folder + "/" + path, withDestinationPath: target)
        }
        for path in folders { try fm.createDirectory(atPath: folder + "/" + path, withIntermediateDirectories: true) }
    }

    /// The tree an install of this build holds with (or without) the optional bundle: write bits
    /// dropped, as installed.
    func tree(hd: Bool) -> ModelTree {
        func wanted(_ path: String) -> Bool { hd || !path.hasPrefix("hd/") }
        var tree = ModelTree()
        for (path, file) in files where wanted(path) {
            tree.files[path] = FileFacts(sha256: SHA256Digest.of(Data(file.bytes)).hex, mode: file.mode & 0o555)
        }
        for (path, target) in links where wanted(path) { tree.links[path] = target }
        for path in folders where wanted(path) { tree.folders.insert(path) }
        for path in Array(tree.files.keys) + Array(tree.links.keys) + Array(tree.folders) {
            var parent = (path as NSString).deletingLastPathComponent
            while !parent.isEmpty {
                tree.folders.insert(parent)
                parent = (parent as NSString).deletingLastPathComponent
            }
        }
        return tree
    }
}

/// The reference model's state: what the player may see, written from the rules as a player reads
/// them (README), not from the library's decision code.
struct ModelState {
    var builds: [ModelBuild] = []
    var hd = true
    var live: ModelDeployment?
    /// Applied deployments, oldest first, one per build (an apply of another selection or a repaired
    /// copy of the same build takes its place): rollback goes to the one before.
    var history: [ModelDeployment] = []
    /// Deployments whose folders the last apply kept (the newest two of the history), less those deleted by
    /// hand and the one a staging started in (README: a sync stages the next build in the previous build's
    /// folder; from then until it is applied, rollback has no build to go back to).
    var kept: Set<ModelDeployment> = []
    /// A sync that stopped part way, or that may have staged a copy of the live build, may have started a
    /// staging in the previous build's folder: a rollback may find nothing to go back to.
    var previousMayBeTaken = false
    /// The build rolled back from: sync does not stage it again until a newer one is published.
    var heldBack: Int?
    /// What an apply may swap in (nil: nothing ready).
    var ready: Set<ModelDeployment?> = [nil]
    /// Deployments that may hold a file damaged by hand: the live one, and every one on disk then
    /// (unchanged files are hard links shared between builds). A repair clears the live one; a
    /// deployment staged after the damage never links a damaged file.
    var tainted: Set<ModelDeployment> = []

    mutating func damagedLiveFile() {
        tainted.formUnion([live].compactMap { $0 } + kept + ready.compactMap { $0 })
    }
    /// Staging was damaged by hand since the last complete sync: an apply may refuse the ready tree (74).
    var stagingDamaged = false
    /// Ready builds an apply killed at `applyMoved` may have moved into builds/ (not yet live): out of
    /// the staging folder's reach, they stay ready whatever the hand does to it.
    var movedReady: Set<ModelDeployment> = []

    /// What a complete sync stages: the newest build with the player's choice, unless it is held back.
    var wanted: ModelDeployment? {
        guard let newest = builds.last, newest.number != heldBack else { return nil }
        return ModelDeployment(build: newest.number, hd: hd)
    }

    func tree(_ deployment: ModelDeployment) -> ModelTree { builds[deployment.build - 1].tree(hd: deployment.hd) }

    mutating func syncCompleted() {
        stagingDamaged = false
        defer { movedReady = movedReady.filter { ready.contains($0) } }
        guard let wanted else { return }
        if wanted == live {
            ready = [nil, live]
            if previous != nil { previousMayBeTaken = true }
        } else {
            // The wanted build was staged, by this sync or an earlier one since the last apply: in the
            // previous build's folder.
            if let previous { kept.remove(previous) }
            if !ready.contains(wanted) { tainted.remove(wanted) }  // staged now, from verified files only
            ready = [wanted]
            heldBack = nil
        }
    }

    /// A sync that did not finish may have made ready any step of the wanted build (required part first).
    mutating func syncInterrupted() {
        if stagingDamaged { ready.insert(nil) }  // it may have dropped a ready tree changed by hand before it stopped
        guard let wanted else { return }
        if previous != nil { previousMayBeTaken = true }
        ready.insert(wanted)
        if wanted.hd { ready.insert(ModelDeployment(build: wanted.build, hd: false)) }
    }

    mutating func applied(_ deployment: ModelDeployment) {
        let mayBeTaken = previousMayBeTaken ? previous : nil
        defer { previousMayBeTaken = mayBeTaken != nil && previous == mayBeTaken }
        history = history.filter { $0.build != deployment.build } + [deployment]
        kept = Set(history.suffix(2)).intersection(kept.union([deployment]))  // a folder deleted by hand stays gone
        live = deployment
        ready = [nil]
        movedReady = []
    }

    var previous: ModelDeployment? {
        guard history.count >= 2, kept.contains(history[history.count - 2]) else { return nil }
        return history[history.count - 2]
    }

    mutating func rolledBack() {
        previousMayBeTaken = false
        guard let from = live, let previous else { return }
        history.removeLast()
        live = previous
        heldBack = from.build
        ready = Set(ready.map { $0?.build == from.build ? nil : $0 })
    }
}

/// One sequence run against a fresh origin and install, with a canary tree beside the install.
struct ModelRun {
    let seed: UInt64
    let fixture: Fixture
    let install: Install
    let canary: String
    var model = ModelState()
    var rng: SeededRandom
    /// How often the live build changed, and how many rollbacks ran: what the sequences exercised.
    var liveChanges = 0
    var rollbacks = 0

    init(seed: UInt64) throws {
        self.seed = seed
        rng = SeededRandom(seed: seed)
        fixture = try Fixture()
        install = try fixture.makeInstall(remotes: [fixture.fileRemote]) { $0.keepBuilds = 2 }
        canary = fixture.directory + "/canary"
        // Files named as the build's, where a link planted in staging would lead a sync.
        for path in ["a.dat", "b.dat", "sub/c.dat", "m1.map", "tex1.bin", "tex2.bin", "game", "VERSION", "sub/tex3.bin"]
        {
            try FileManager.default.createDirectory(
                atPath: canary + "/" + (path as NSString).deletingLastPathComponent,
                withIntermediateDirectories: true)
            try Data("canary \(path)".utf8).write(to: URL(fileURLWithPath: canary + "/" + path))
        }
    }

    /// A random sequence: a first publish, then 8 to 16 weighted operations.
    static func generate(seed: UInt64) -> [ModelOp] {
        var rng = SeededRandom(seed: seed ^ 0x5EED)
        let weighted: [(Int, (inout SeededRandom) -> ModelOp)] = [
            (4, { _ in .publish }), (3, { _ in .sync }), (5, { _ in .update }),
            (1, { .syncClockMoved(days: [-3, 2, 400][Int($0.next() % 3)]) }),
            (2, { .syncKilled(delayMicroseconds: UInt32($0.next() % 120_000)) }),
            (1, { _ in .syncDiscretionary }), (4, { _ in .apply }), (1, { _ in .applyWhileGameRuns }),
            (1, { _ in .launch }),
            (2, { _ in .rollback }), (1, { _ in .bundlesAdd }), (1, { _ in .bundlesRemove }), (1, { _ in .repair }),
            (1, { _ in .emptyStaging }), (1, { _ in .deleteStaging }), (1, { _ in .stagingFolderToLink }),
            (1, { .truncateLiveFile(pick: Int($0.next() % 64)) }), (1, { .chmodLiveFile(pick: Int($0.next() % 64)) }),
            (1, { _ in .deletePreviousBuild }), (1, { .stateFolderToLink(pick: Int($0.next() % 4)) }),
            (2, { _ in .plantStray }),
            (2, { .syncCrashed(point: ModelOp.syncPoints[Int($0.next() % 3)]) }),
            (1, { .applyCrashed(point: ModelOp.applyPoints[Int($0.next() % 4)]) })
        ]
        let total = weighted.reduce(0) { $0 + $1.0 }
        var ops: [ModelOp] = [.publish]
        for _ in 0..<(12 + Int(rng.next() % 17)) {
            var roll = Int(rng.next() % UInt64(total))
            for (weight, make) in weighted {
                if roll < weight {
                    ops.append(make(&rng))
                    break
                }
                roll -= weight
            }
        }
        return ops
    }

    /// Runs `ops`; the first broken promise, or nil.
    mutating func run(_ ops: [ModelOp]) throws -> String? {
        let canaryBefore = try ModelTree.read(canary)
        let trace = ProcessInfo.processInfo.environment["PATCHSYNC_MODEL_TRACE"] != nil
        for (index, op) in ops.enumerated() {
            if trace {
                let staged =
                    (try? FileManager.default.subpathsOfDirectory(atPath: stagingRoot))?.filter {
                        !$0.contains("/") || $0.components(separatedBy: "/").count == 2
                    }.sorted() ?? []
                print(
                    "seed \(seed) step \(index + 1): \(op); live \(model.live.map(\.description) ?? "-"), ready \(model.ready), staging \(staged)"
                )
            }
            if let broken = try step(op) { return "step \(index + 1) (\(op)): \(broken)" }
            if try ModelTree.read(canary) != canaryBefore {
                return "step \(index + 1) (\(op)): the canary tree beside the install changed"
            }
            if let broken = try check(after: op) { return "after step \(index + 1) (\(op)): \(broken)" }
        }
        return nil
    }

    /// Shortens a failing sequence one step at a time while it still fails (each try on a fresh world).
    static func shrink(seed: UInt64, _ ops: [ModelOp], failure: String) throws -> (ops: [ModelOp], failure: String) {
        var best = (ops: ops, failure: failure)
        var index = best.ops.count - 1
        while index >= 0 {
            var candidate = best.ops
            candidate.remove(at: index)
            var run = try ModelRun(seed: seed)
            if let failed = try run.run(candidate) { best = (candidate, failed) }
            index = min(index, best.ops.count) - 1
        }
        return best
    }

    /// Runs `patchsync ARGS… --install ROOT [-- GAME…]`.
    private func cli(_ arguments: [String], game: [String] = []) throws -> CLI.Result {
        let result = try CLI.run(arguments + ["--install", install.root] + (game.isEmpty ? [] : ["--"] + game))
        if ProcessInfo.processInfo.environment["PATCHSYNC_MODEL_TRACE"] != nil && arguments != ["verify", "--full"] {
            print("  \(arguments.joined(separator: " ")) → \(result.status)\n\(result.stdout)\(result.stderr)")
        }
        return result
    }

    /// Carries out one operation and checks what the model says of its result.
    private mutating func step(_ op: ModelOp) throws -> String? {
        let syncing: Bool =
            switch op {
            case .sync, .syncKilled, .syncDiscretionary, .update, .syncClockMoved: true
            default: false
            }
        if syncing && model.builds.isEmpty { return nil }  // a shortened sequence may have lost its first publish
        switch op {
        case .publish:
            let build = ModelBuild.next(after: model.builds.last, number: model.builds.count + 1, rng: &rng)
            let folder = fixture.directory + "/src-\(build.number)"
            try build.write(to: folder)
            try fixture.publish(folder, id: "\(build.number)", bundles: ModelBuild.bundles)
            model.builds.append(build)
        case .sync:
            let result = try cli(["sync"])
            guard result.status == 0 else { return "sync exited \(result.status): \(result.stderr)" }
            model.syncCompleted()
        case .update:
            if let broken = try step(.sync) { return broken }
            return try step(.apply)
        case .syncClockMoved(let days):
            // Signed metadata expires (timestamp: a day, snapshot: a week): far ahead, the sync refuses it.
            // NO_FAKE_STAT: the files' times stay the kernel's (only the clock moves), as on a machine whose clock is off.
            let result = try CLI.runProgram(
                "/usr/bin/env",
                [
                    "NO_FAKE_STAT=1", "faketime", "-f", "\(days > 0 ? "+" : "")\(days)d",
                    CLI.executable, "sync", "--install", install.root
                ])
            if days > 300 {
                guard result.status == 65 else {
                    return "sync a year ahead of signed expiry exited \(result.status) (65 expected): \(result.stdout)"
                }
                // the refused sync still drops a ready tree changed by hand
                if model.stagingDamaged { model.ready.insert(nil) }
            } else {
                guard result.status == 0 else {
                    return "sync with the clock moved \(days) days exited \(result.status): \(result.stdout)"
                }
                model.syncCompleted()
            }
        case .syncKilled(let delay):
            let sync = try CLI.start(["sync", "--install", install.root, "--quiet"])
            usleep(delay)
            if sync.process.isRunning { kill(sync.process.processIdentifier, SIGKILL) }
            sync.process.waitUntilExit()
            if sync.process.terminationReason == .exit && sync.process.terminationStatus == 0 {
                model.syncCompleted()
            } else {
                model.syncInterrupted()
            }
        case .syncCrashed(let point):
            let result = try CLI.run(
                ["sync", "--install", install.root, "--quiet"], environment: ["PATCHSYNC_CRASH_AT": point])
            if result.status == 0 { model.syncCompleted() } else { model.syncInterrupted() }
        case .applyCrashed(let point):
            let killed =
                try CLI.run(["apply", "--install", install.root], environment: ["PATCHSYNC_CRASH_AT": point]).status
                == SIGKILL
            // Killed before the flip: the old build is live; at the flip or after it: the ready one is, whatever was recorded.
            let live = try liveDeployment()
            if live != model.live || (killed && point == "applyFlipped") {
                guard let live, model.ready.contains(live) else {
                    return
                        "apply killed at \(point) made \(live.map(\.description) ?? "nothing") live; ready was \(model.ready)"
                }
                if live != model.live { liveChanges += 1 }
                model.applied(live)
            } else {
                // a ready tree changed by hand may have been refused and dropped before the kill
                if model.stagingDamaged { model.ready.insert(nil) }
                if killed && point == "applyMoved" { model.movedReady.formUnion(model.ready.compactMap { $0 }) }
            }
            // The next command, whichever it is (here status, which only reads), sees that build current in the records too.
            let status = try cli(["status"])
            guard status.status == 0 else {
                return "status after apply killed at \(point) exited \(status.status): \(status.stderr)"
            }
            let recorded = try install.recordedFolders().current
            guard recorded == install.currentDeployment() else {
                return
                    "after apply killed at \(point), the next command (status) left the state recording \(recorded ?? "nothing") "
                    + "as current; the link says \(install.currentDeployment() ?? "nothing")"
            }
        case .syncDiscretionary:
            let result = try cli(["sync", "--discretionary"])
            switch result.status {
            case 0: model.syncCompleted()
            case 75: model.syncInterrupted()
            default: return "sync --discretionary exited \(result.status): \(result.stderr)"
            }
        case .apply, .launch:
            let result = try cli(op == .apply ? ["apply"] : ["launch"], game: op == .apply ? [] : ["/bin/true"])
            let live = try liveDeployment()
            // A ready tree changed by hand since it was verified is refused and dropped (apply: 74; launch
            // skips the apply and starts the current build, or exits 75, not playable yet, when there is none).
            let refusedTree =
                model.stagingDamaged && live == model.live
                && (op == .apply ? result.status == 74 : result.status == 0 || (result.status == 75 && live == nil))
            if refusedTree || (op == .launch && result.status == 75 && live == nil && model.ready.contains(nil)) {
                model.ready = [nil]
                return nil
            }
            guard result.status == 0 else { return "\(op) exited \(result.status): \(result.stderr)" }
            if live == model.live, !model.ready.contains(nil), !model.ready.contains(live),
                !(op == .launch && model.stagingDamaged)
            {
                return
                    "\(op) left \(live.map(\.description) ?? "nothing") live while \(model.ready.map { $0?.description ?? "nothing" }.sorted()) was ready"
            }
            guard live == model.live || model.ready.contains(live) else {
                return
                    "\(op) made \(live.map(\.description) ?? "nothing") live; the model allows \(model.live.map(\.description) ?? "nothing") or \(model.ready.map { $0?.description ?? "nothing" }.sorted())"
            }
            if let live, live != model.live || model.ready.contains(live) {
                if live != model.live { liveChanges += 1 }
                model.applied(live)
            } else {
                model.ready = [nil]
            }
        case .applyWhileGameRuns:
            let game = try install.holdRunningLock()
            let result = try cli(["apply"])
            withExtendedLifetime(game) {}
            let live = try liveDeployment()
            guard live == model.live else {
                return "apply while the game runs changed the live build to \(live.map(\.description) ?? "nothing")"
            }
            switch result.status {
            case 75 where model.ready != [nil]: model.ready.remove(nil)
            case 0 where model.ready.contains(nil): model.ready = [nil]
            case 74 where model.stagingDamaged: model.ready = [nil]
            default:
                return "apply while the game runs exited \(result.status) with ready \(model.ready): \(result.stderr)"
            }
        case .rollback:
            let result = try cli(["rollback"])
            if model.stagingDamaged { model.ready.insert(nil) }  // a ready tree changed by hand is dropped
            let expected = model.previous
            if let expected {
                // A previous build damaged by hand (a file truncated) is refused, and nothing changes.
                if result.status == 74 && model.tainted.contains(expected) { return nil }
                // A sync that stopped part way may have started staging in its folder: nothing to go back to.
                if result.status == 64 && model.previousMayBeTaken {
                    model.kept.remove(expected)
                    model.previousMayBeTaken = false
                    return nil
                }
                guard result.status == 0 else {
                    return "rollback to \(expected) exited \(result.status): \(result.stderr)"
                }
                model.rolledBack()
                rollbacks += 1
            } else if result.status != 64 {
                return
                    "rollback with no kept previous build exited \(result.status) (64 expected): \(result.stdout)\(result.stderr)"
            }
        case .bundlesAdd, .bundlesRemove:
            let result = try cli(["bundles", op == .bundlesAdd ? "add" : "remove", "hd"])
            guard result.status == 0 else { return "\(op) exited \(result.status): \(result.stderr)" }
            model.hd = op == .bundlesAdd
        case .repair:
            guard let live = model.live else { return nil }
            let damaged = try ModelTree.read(install.root + "/current") != model.tree(live)
            let result = try cli(["verify", "--repair", "--now"])
            if model.stagingDamaged { model.ready.insert(nil) }  // a ready tree changed by hand is dropped
            guard result.status == 0 else {
                return "verify --repair --now exited \(result.status): \(result.stdout)\(result.stderr)"
            }
            if damaged {  // a repaired copy of the live build was staged (replacing what was ready) and applied
                model.applied(live)
                model.tainted.remove(live)
            }
        case .emptyStaging:
            // a link planted there: the hand works on the install only
            guard FileSystemProbe.isFolder(stagingRoot) else { return nil }
            for name in (try? FileManager.default.contentsOfDirectory(atPath: stagingRoot)) ?? [] {
                for entry in (try? FileManager.default.contentsOfDirectory(atPath: stagingRoot + "/" + name)) ?? [] {
                    try FileManager.default.removeItem(atPath: stagingRoot + "/" + name + "/" + entry)
                }
            }
            model.stagingDamaged = true
        case .deleteStaging:
            try? FileManager.default.removeItem(atPath: stagingRoot)
            model.stagingDamaged = true
            // The staged trees are gone: an apply finds nothing ready until a sync stages again, but for
            // one a killed apply moved into builds/ already.
            model.ready = Set([nil] + model.ready.filter { $0.map(model.movedReady.contains) ?? false })
        case .stagingFolderToLink:
            // a link planted there: the hand works on the install only
            guard FileSystemProbe.isFolder(stagingRoot) else { return nil }
            guard let name = try? FileManager.default.contentsOfDirectory(atPath: stagingRoot).sorted().first else {
                return nil
            }
            let folder = stagingRoot + "/" + name
            guard FileSystemProbe.isFolder(folder) else { return nil }
            let target = ["data", "hd", "maps"].first { FileSystemProbe.isFolder(folder + "/" + $0) } ?? "data"
            if FileSystemProbe.isFolder(folder + "/" + target) {
                try FileManager.default.removeItem(atPath: folder + "/" + target)
            } else {
                unlink(folder + "/" + target)  // a link planted before, or a file: never what it points to
            }
            try FileManager.default.createSymbolicLink(atPath: folder + "/" + target, withDestinationPath: canary)
            model.stagingDamaged = true
        case .stateFolderToLink(let pick):
            let folder = install.root + "/.patchsync/" + ModelOp.stateFolders[pick % ModelOp.stateFolders.count]
            if FileSystemProbe.isFolder(folder) {
                try FileManager.default.removeItem(atPath: folder)
            } else {
                unlink(folder)
            }
            try FileManager.default.createSymbolicLink(atPath: folder, withDestinationPath: canary)
            if folder.hasSuffix("/staging") { model.stagingDamaged = true }
        case .plantStray:
            // a link planted there: the hand works on the install only
            guard FileSystemProbe.isFolder(stagingRoot) else { return nil }
            guard let name = try? FileManager.default.contentsOfDirectory(atPath: stagingRoot).sorted().first,
                FileSystemProbe.isFolder(stagingRoot + "/" + name)
            else { return nil }
            let folder = stagingRoot + "/" + name
            try? FileManager.default.removeItem(atPath: folder + "/stray-link")
            try FileManager.default.createSymbolicLink(atPath: folder + "/stray-link", withDestinationPath: canary)
            try Data("stray".utf8).write(to: URL(fileURLWithPath: folder + "/stray.txt"))
            model.stagingDamaged = true
        case .truncateLiveFile(let pick), .chmodLiveFile(let pick):
            guard install.currentDeployment() != nil else { return nil }
            let files = try ModelTree.read(install.root + "/current").files.keys.filter { !$0.hasSuffix("VERSION") }
                .sorted()
            guard !files.isEmpty else { return nil }
            let path = install.root + "/current/" + files[pick % files.count]
            if case .truncateLiveFile = op {
                let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
                if size == 0 {
                    try Data([1]).write(to: URL(fileURLWithPath: path))
                } else if truncate(path, off_t(size / 2)) != 0 {
                    return "the damage did not happen: truncate \(path): \(String(cString: strerror(errno)))"
                }
            } else {
                var st = stat()
                guard lstat(path, &st) == 0, chmod(path, (st.st_mode & 0o777) ^ 0o111) == 0 else {
                    return "the damage did not happen: chmod \(path): \(String(cString: strerror(errno)))"
                }
            }
            model.damagedLiveFile()
        case .deletePreviousBuild:
            guard let current = install.currentDeployment() else { return nil }
            for name in try FileManager.default.contentsOfDirectory(atPath: install.root + "/builds")
            where name != current {
                if let deployment = try? Self.deployment(of: ModelTree.read(install.root + "/builds/" + name)) {
                    model.kept.remove(deployment)
                    // A ready tree a killed apply moved into builds/ goes with it: nothing of it is ready
                    // any more, and an apply may refuse the record (74) or find it dropped.
                    if model.movedReady.remove(deployment) != nil {
                        model.ready.remove(deployment)
                        model.ready.insert(nil)
                        model.stagingDamaged = true
                    }
                }
                try FileManager.default.removeItem(atPath: install.root + "/builds/" + name)
            }
        }
        return nil
    }

    private var stagingRoot: String { install.root + "/.patchsync/staging" }

    /// Which deployment the live tree is, by its VERSION files (nil: nothing installed).
    private func liveDeployment() throws -> ModelDeployment? {
        guard install.currentDeployment() != nil else { return nil }
        return try Self.deployment(of: ModelTree.read(install.root + "/current"))
    }

    private static func deployment(of tree: ModelTree) throws -> ModelDeployment? {
        guard let version = tree.files["VERSION"] else { return nil }
        for number in 1...64 where SHA256Digest.of(Data("\(number)\n".utf8)).hex == version.sha256 {
            return ModelDeployment(build: number, hd: tree.files["hd/VERSION"] != nil)
        }
        return nil
    }

    /// The promises that hold after every step.
    private mutating func check(after op: ModelOp) throws -> String? {
        // before verify, which drops a ready tree changed by hand
        if let broken = try checkRecords(after: op) { return broken }
        let live = try liveDeployment()
        guard live == model.live else {
            return
                "the live tree is \(live.map(\.description) ?? "nothing"); the model has \(model.live.map(\.description) ?? "nothing")"
        }
        if let live {
            let actual = try ModelTree.read(install.root + "/current")
            let expected = model.tree(live)
            let differences = actual.differences(from: expected)
            if !model.tainted.contains(live) && !differences.isEmpty {
                return "the live tree is not exactly \(live): \(differences.prefix(6))"
            }
            let verify = try cli(["verify", "--full"])
            if model.stagingDamaged { model.ready.insert(nil) }  // verify drops a ready tree changed by hand
            if differences.isEmpty != (verify.status == 0) {
                return
                    "verify --full exited \(verify.status) while the live tree \(differences.isEmpty ? "is intact" : "differs at \(differences.prefix(4))"): \(verify.stdout)"
            }
        }
        return nil
    }

    /// Disk use stays bounded and what the state records exists.
    private func checkRecords(after op: ModelOp) throws -> String? {
        let builds = (try? FileManager.default.contentsOfDirectory(atPath: install.root + "/builds")) ?? []
        if builds.count > 4 { return "builds/ holds \(builds.count) folders: \(builds.sorted())" }
        // A link planted in place of staging/ (by the last step) holds no staged folder of the install's.
        let staged =
            FileSystemProbe.isFolder(stagingRoot)
            ? (try? FileManager.default.contentsOfDirectory(atPath: stagingRoot)) ?? [] : []
        if staged.count > 3 { return "staging/ holds \(staged.count) folders: \(staged.sorted())" }
        let status = try install.recordedFolders()
        if status.current != install.currentDeployment() {
            return
                "the state records \(status.current ?? "nothing") as current, the link says \(install.currentDeployment() ?? "nothing")"
        }
        if let current = status.current, !FileSystemProbe.isFolder(install.root + "/builds/" + current) {
            return "current \(current) has no folder in builds/"
        }
        // After a library command (not hand damage), a ready record names a tree that is there.
        // (Hand damage, killed commands, and commands that leave the install's state alone: a bundle choice
        // is config only, a repair with nothing installed runs nothing.)
        let byHand: Bool =
            switch op {
            case .publish, .emptyStaging, .deleteStaging, .stagingFolderToLink, .truncateLiveFile, .chmodLiveFile,
                .deletePreviousBuild,
                .stateFolderToLink, .plantStray, .bundlesAdd, .bundlesRemove, .syncCrashed, .applyCrashed, .syncKilled:
                true
            case .repair: model.live == nil
            default: false
            }
        // (An apply killed after moving the ready tree into builds/ leaves it there, and the next apply goes on.)
        if !byHand, let ready = status.ready, !FileSystemProbe.isFolder(stagingRoot + "/" + ready),
            !FileSystemProbe.isFolder(install.root + "/builds/" + ready)
        {
            return "the state records \(ready) ready, but neither staging/\(ready) nor builds/\(ready) is there"
        }
        return nil
    }
}

enum FileSystemProbe {
    /// A real folder (not a link to one).
    static func isFolder(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR
    }
}
