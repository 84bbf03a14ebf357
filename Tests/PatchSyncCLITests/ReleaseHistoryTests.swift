import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// A repository no command can wedge: a seeded generator runs random release histories through the
/// command line — publishes (at once and as preloads, with and without bundles, with links, empty
/// folders and mode changes), promotions, rollbacks, withdrawals, prunes (with a grace, some killed half
/// way through their deletions), releases, refreshes, renewals and root rotations (new root, online and
/// targets keys), with the clock moved days to years (libfaketime) while the publisher's routine runs
/// (the `repo refresh` cron job, `repo check` and the renewal it asks for). A reference model written
/// apart from the library (it knows each channel's builds in the order they were listed, which are
/// preloads with their release day, which a rollback left, and the keys the publisher holds) predicts
/// every command's outcome, refusals included, and after each step:
///
/// - the channels list what the model lists, in its order, and no build players can install is listed
///   with a sequence at or below one they may have installed (they would refuse it as a rollback);
/// - the root names the keys the publisher holds, the releases role the online key, and every pending
///   preload's content key is in the publisher's key folders: no key is lost;
/// - every plain build a channel lists (the current one, and those a rollback or a withdrawal may put
///   back) has its manifest, objects, delta packs and manifest deltas in the origin;
/// - `repo check` finds nothing to renew within 30 days and no listed build to fix: no metadata expires
///   within the refresh job's horizon, and no preload is stranded or overdue;
/// - python-tuf, one long-lived client with its cache kept across the whole history, refreshes and
///   downloads every target top-level targets and the releases role list;
/// - a PatchSync player on each channel syncs and applies and holds exactly the channel's current build
///   (another on each channel is left behind a few builds and killed in the middle of syncs, and catches
///   up at random steps);
/// - every pending preload can still be released (on a copy of the origin, oldest first);
/// - after a prune, a player that read the metadata of the oldest step every prune's grace since still
///   covers (a client still fetching what it read then) installs the build it read, byte for byte.
///
/// A failure prints its seed and the shortest sequence found that still fails.
/// `PATCHSYNC_HISTORY_SEQUENCES` (default 12, over 4 shards; `make soak` runs 200) and `PATCHSYNC_HISTORY_SEED` (default: a
/// fixed base, so CI is repeatable) set how much runs; `PATCHSYNC_HISTORY_TRACE` prints every command.
@Suite("A repository's release history against random sequences of publisher commands", .tags(.cli))
struct ReleaseHistoryTests {
    static let shards = 4
    static var sequences: Int { Int(ProcessInfo.processInfo.environment["PATCHSYNC_HISTORY_SEQUENCES"] ?? "") ?? 12 }
    static var baseSeed: UInt64 {
        UInt64(ProcessInfo.processInfo.environment["PATCHSYNC_HISTORY_SEED"] ?? "") ?? 20261126
    }

    @Test(
        "every listed build installs byte-exact on every channel, python-tuf downloads every listed target, every pending preload can be released, no key is lost, nothing a listed build, a preload or a client within the grace needs is deleted, no metadata expires within the refresh horizon, and no command fails but where the model says it refuses",
        arguments: 0..<shards)
    func randomHistories(shard: Int) throws {
        try Self.histories(shard: shard, sequences: Self.sequences, inBucket: false)
    }

    /// `PATCHSYNC_HISTORY_BUCKET_SEQUENCES` (default 4, over 4 shards).
    static var bucketSequences: Int {
        Int(ProcessInfo.processInfo.environment["PATCHSYNC_HISTORY_BUCKET_SEQUENCES"] ?? "") ?? 4
    }

    /// The same histories with the repository in an S3-compatible bucket (moto on loopback, its clock moved
    /// with the commands'): every publisher command runs with `--origin s3://…` from one of two machines (two
    /// cache folders, taking turns by step), the upload step instead deletes a machine's cache by hand, and
    /// players, python-tuf and the checks read a third machine's mirror of the bucket, pulled after every step.
    /// A prune's grace is counted from when the bucket got each metadata version, whichever machine prunes.
    @Test(
        "the same promises with the repository in a bucket, written from two machines whose caches are deleted at random, prunes killed half way",
        arguments: 0..<shards)
    func randomHistoriesInABucket(shard: Int) throws {
        try Self.histories(shard: shard, sequences: Self.bucketSequences, inBucket: true)
    }

    /// A build unlisted by a prune stays for the grace, counted from when the bucket got the targets
    /// version that stopped listing it, on whichever machine the prune runs: a cache's own file times
    /// are those of its downloads (days behind here, as a cache pulled long ago is; a CI runner's new
    /// cache reads every version as written now).
    @Test(
        "in a bucket, a prune's grace counts from when the bucket got each metadata version, not from when the pruning machine's cache downloaded it"
    )
    func bucketPruneGrace() throws {
        let ops: [HistoryOp] = [
            .publish(channel: "live", bundles: false), .advance(days: 400), .publish(channel: "live", bundles: false),
            .publish(channel: "live", bundles: false), .prune(keep: 1, graceDays: 30, killAtUnlink: nil)
        ]
        var run = try HistoryRun(seed: Self.baseSeed, inBucket: true)
        let failure = try run.run(ops)
        #expect(failure == nil, "\(failure ?? "")")
        #expect(run.installs >= 3, "the players installed \(run.installs) builds: the grace went unchecked")
    }

    static func histories(shard: Int, sequences: Int, inBucket: Bool) throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: HistoryRun.python),
            "python-tuf is not installed in \(HistoryRun.python): run `make test`, which installs it")
        var ran = 0, steps = 0, installs = 0, refusals = 0, releases = 0, uploads = 0, reused = 0, consolidated = 0
        var killed = 0
        for index in stride(from: shard, to: sequences, by: Self.shards) {
            let seed = Self.baseSeed &+ UInt64(index) &+ (inBucket ? 0x5_0000 : 0)
            let ops = HistoryRun.generate(seed: seed)
            var run = try HistoryRun(seed: seed, inBucket: inBucket)
            let failure = try run.run(ops)
            ran += 1
            steps += ops.count
            installs += run.installs
            refusals += run.refusals
            releases += run.releases
            uploads += run.uploads
            reused += run.reusedChunks
            killed += run.attemptsKilled
            consolidated += run.consolidated
            guard let failure else { continue }
            let shortest = try HistoryRun.shrink(seed: seed, ops, failure: failure, inBucket: inBucket)
            Issue.record(
                """
                release history\(inBucket ? " in a bucket" : "") failed, seed \(seed) (PATCHSYNC_HISTORY_SEED=\(Self.baseSeed) sequence \(index)): \(shortest.failure)
                shortest failing sequence (\(shortest.ops.count) of \(ops.count) steps):
                \(shortest.ops.map { (op: HistoryOp) -> String in "  " + op.description }.joined(separator: "\n"))
                """)
            return
        }
        print(
            "release history\(inBucket ? " in a bucket" : "") shard \(shard): \(ran) sequences, \(steps) steps (\(installs) builds installed by players, "
                + "\(releases) preloads released, \(uploads) \(inBucket ? "caches deleted, \(killed) publishes killed" : "uploads to S3"), \(refusals) refusals the model predicted; "
                + "\(reused) chunks left in earlier builds' objects, \(consolidated) files stored whole again), all invariants held"
        )
        #expect(ran == 0 || installs > 0, "no player ever installed a build: the model checked nothing")
        #expect(ran < 2 || reused > 0, "no publish left a chunk in an earlier object: the chunk store went untested")
    }
}

/// How a root rotation changes the keys.
enum HistoryRotation: String, CaseIterable {
    case root, online, targets, all
}

/// One step of a release history. Builds are named by what the model holds when the step runs (`pick`
/// counts along a channel's builds, newest first), so a shortened sequence still means something.
enum HistoryOp: CustomStringConvertible, Equatable {
    /// The next build, published at once.
    case publish(channel: String, bundles: Bool)
    /// The next build as a preload, released `releaseIn` days on (and after the channel's other preloads).
    case preload(channel: String, releaseIn: Int, bundles: Bool)
    case promote(from: String, to: String, pick: Int)
    case rollback(channel: String)
    case withdraw(channel: String, pick: Int)
    /// `repo prune`, killed at its n-th unlink when `killAtUnlink` is set.
    case prune(keep: Int, graceDays: Int, killAtUnlink: Int?)
    /// `repo release` of the channel's oldest pending preload, ahead of its day.
    case release(channel: String)
    case refresh
    case renew(root: Bool, targets: Bool)
    case rotateRoot(HistoryRotation)
    /// The clock moves `days` on; the publisher's routine runs (refresh job, `repo check`, the renewal it asks for).
    case advance(days: Int)
    /// The player left behind on `channel` syncs and applies.
    case catchUp(channel: String)
    /// The player left behind on `channel` syncs and is killed when it writes its first batch of chunks.
    case syncKilled(channel: String)
    /// `patchsync upload` to the S3 server; a player of live reading the bucket then syncs and applies.
    case upload

    var description: String {
        switch self {
        case .publish(let channel, let bundles):
            return "publish the next build on \(channel)" + (bundles ? " with a bundles file" : "")
        case .preload(let channel, let days, let bundles):
            return "publish the next build on \(channel) as a preload released in \(days) days"
                + (bundles ? ", with a bundles file" : "")
        case .promote(let from, let to, let pick):
            return "repo promote (\(from)'s build #\(pick), newest first) --from \(from) --to \(to)"
        case .rollback(let channel): return "repo rollback --channel \(channel)"
        case .withdraw(let channel, let pick):
            return "repo withdraw (\(channel)'s build #\(pick), newest first) --channel \(channel)"
        case .prune(let keep, let grace, let kill):
            return "repo prune --keep \(keep) --grace \(grace)d" + (kill.map { ", killed at its unlink #\($0)" } ?? "")
        case .release(let channel): return "repo release (the oldest pending preload of \(channel))"
        case .refresh: return "repo refresh"
        case .renew(let root, let targets):
            return "repo renew" + (root ? " --root-key" : "") + (targets ? " --targets-key --online-key" : "")
        case .rotateRoot(let rotation): return "repo rotate-root: new \(rotation.rawValue) key(s)"
        case .advance(let days): return "the clock moves \(days) days on (refresh job, repo check, renewals)"
        case .catchUp(let channel): return "the player left behind on \(channel): sync && apply"
        case .syncKilled(let channel): return "the player left behind on \(channel): sync, killed at its first batch"
        case .upload: return "patchsync upload to the S3 bucket, and a player of the bucket syncs"
        }
    }
}

/// A build as one channel lists it, in the model.
struct HistoryEntry: Equatable {
    var build: Int
    /// When it was listed, in the model's count: a channel's builds in listing order, newest highest.
    var order: Int
    /// For a preload: the day it is released at the latest.
    var releaseDay: Int?
    var released = false
    /// Marked by the rollback that took the channel off it: no later rollback goes back to it.
    var withdrawn = false
    /// Set when a rollback or a withdrawal put it back: the build the channel left.
    var rollbackFrom: Int?

    /// A plain build, or a preload whose key is released.
    var installable: Bool { releaseDay == nil || released }
    var pending: Bool { !installable }

    var summary: String {
        Self.summary(
            build: "\(build)", preload: releaseDay != nil, released: released, withdrawn: withdrawn,
            rollbackFrom: rollbackFrom.map { "\($0)" })
    }

    static func summary(build: String, preload: Bool, released: Bool, withdrawn: Bool, rollbackFrom: String?) -> String
    {
        build + (preload ? (released ? " (released preload)" : " (pending preload)") : "")
            + (withdrawn ? " (withdrawn)" : "")
            + (rollbackFrom.map { " (back from \($0))" } ?? "")
    }
}

/// The key files the publisher signs with now.
struct HistoryKeys: Equatable {
    var root: String
    var targets: String
    var online: String
}

/// The reference model: what each channel lists, written from the commands' help pages as a publisher
/// reads them, not from the library's listing code.
struct HistoryModel {
    static let channels = ["live", "beta"]
    var day = 0
    /// Every build folder written, build n at n - 1.
    var builds: [ModelBuild] = []
    var entries: [String: [HistoryEntry]] = [:]
    /// The listing count (one for all channels: only the order within a channel matters).
    var order = 0
    /// `channel/build` of every content key released (the releases role keeps them all).
    var released: Set<String> = []
    var keys: HistoryKeys
    /// The newest listing each channel ever had: players saw it, so no later one may come below it.
    var newestEver: [String: Int] = [:]
    /// Channels whose record says a withdraw left them without an installable build.
    var withdrawnRecord: Set<String> = []

    /// The channel's builds, newest listed first.
    func listed(_ channel: String) -> [HistoryEntry] { (entries[channel] ?? []).sorted { $0.order > $1.order } }

    /// The build players of the channel install: the newest listed that is installable.
    func current(_ channel: String) -> HistoryEntry? { listed(channel).first { $0.installable } }

    /// The channel's pending preloads, oldest first (the order they are released in).
    func pending(_ channel: String) -> [HistoryEntry] { listed(channel).filter(\.pending).reversed() }

    /// Pending preloads listed after the current build: a build listed now would come after them, and
    /// players would never move on to them.
    func pendingAbove(_ channel: String) -> [HistoryEntry] {
        let floor = current(channel)?.order ?? 0
        return listed(channel).filter { $0.pending && $0.order > floor }
    }

    /// Lists `build` on `channel` as its newest build (replacing its earlier listing there).
    mutating func list(
        _ build: Int, on channel: String, releaseDay: Int? = nil, released: Bool = false, rollbackFrom: Int? = nil
    ) {
        order += 1
        newestEver[channel] = order
        unlist(build, from: channel)
        entries[channel, default: []].append(
            HistoryEntry(
                build: build, order: order, releaseDay: releaseDay, released: released, rollbackFrom: rollbackFrom))
    }

    /// Lists `build` as the channel's newest, then `waiting` (its pending preloads that were above the current
    /// build) again above it, oldest first, as the help pages say: a hotfix, promote or rollback never
    /// strands a preload, and what players preloaded stays valid.
    mutating func list(
        _ entry: HistoryEntry, on channel: String, rollbackFrom: Int? = nil, above waiting: [HistoryEntry]
    ) {
        list(
            entry.build, on: channel, releaseDay: entry.releaseDay, released: entry.released, rollbackFrom: rollbackFrom
        )
        for preload in waiting.sorted(by: { $0.order < $1.order }) {
            list(preload.build, on: channel, releaseDay: preload.releaseDay)
        }
    }

    /// Signed targets changed: each channel's record follows (a withdrawal is told until the channel lists
    /// an installable build again; `emptying` is the channel a withdraw just emptied).
    mutating func committed(emptying: String? = nil) {
        for channel in Self.channels {
            if channel == emptying {
                withdrawnRecord.insert(channel)
            } else if current(channel) != nil {
                withdrawnRecord.remove(channel)
            }
        }
    }

    /// Whether signed targets holds a record of `channel`: its newest listing ever is no longer listed
    /// (players must never see a sequence below it), or a withdraw emptied it.
    func hasRecord(_ channel: String) -> Bool {
        (newestEver[channel] ?? 0) > (listed(channel).map(\.order).max() ?? 0) || withdrawnRecord.contains(channel)
    }

    mutating func unlist(_ build: Int, from channel: String) { entries[channel]?.removeAll { $0.build == build } }

    mutating func markWithdrawn(_ build: Int, on channel: String) {
        guard let index = entries[channel]?.firstIndex(where: { $0.build == build }) else { return }
        entries[channel]?[index].withdrawn = true
    }

    mutating func markReleased(_ build: Int, on channel: String) {
        guard let index = entries[channel]?.firstIndex(where: { $0.build == build }) else { return }
        entries[channel]?[index].released = true
        released.insert("\(channel)/\(build)")
    }

    /// What `repo prune --keep keep` unlists: the installable builds of each channel beyond its newest
    /// `keep` (pending preloads never count and are never unlisted).
    mutating func unlistBeyond(keep: Int) {
        for channel in Self.channels {
            for entry in listed(channel).filter(\.installable).dropFirst(max(1, keep)) {
                unlist(entry.build, from: channel)
            }
        }
    }
}

/// A player's install following one channel.
struct HistoryPlayer {
    var channel: String
    /// Syncs after every step; the other one is left behind and catches up at random steps.
    var follows: Bool
    var root: String
    /// The build its live tree must hold (nil: none yet).
    var installed: Int?

    var name: String { "\(channel) \(follows ? "follower" : "laggard")" }
}

/// The origin's metadata as one step left it, served on its own beside the origin's targets and
/// objects: a client that read it then and is still fetching what it listed.
struct HistoryView {
    var step: Int
    var day: Int
    var folder: String
    /// The earliest expiry of the metadata it holds: a client refuses it afterwards.
    var validUntil: Date
    /// The build players of each channel installed then.
    var current: [String: Int]
    /// Whether a pending preload was listed on each channel (an apply then waits for it).
    var waiting: [String: Bool]
    /// Every prune since kept what a client of this view needs (it was within each one's grace).
    var covered = true
}

/// Thrown when a world cannot be set up at all.
struct HistorySetupError: Error, CustomStringConvertible {
    var description: String
}

/// One release history run against a fresh origin served by nginx, with four players.
struct HistoryRun {
    static let repoRoot =
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path
    static var python: String { repoRoot + "/.venv-tuf/bin/python" }
    static var client: String { repoRoot + "/Tests/Interop/tuf_history_client.py" }
    /// Files stay small: the histories exercise the repository, not the transfer.
    static let largestFile = 24_000
    /// One large file in every build, changed in a few places each time: with small chunks and a low
    /// fragmentation bound its chunks stay in the objects of earlier builds (format 7), some of them
    /// pruned or withdrawn since, and every few builds it is stored whole again.
    static let pak = "paks/world.pak"
    static let chunkStore = ["--chunk-size", "16", "--small-file", "16", "--range-size", "24"]

    /// The pak after `previous`: 160 KiB the first time (half text, half random), then one to three
    /// regions of up to 8 KiB rewritten and sometimes 1 KiB inserted (what follows shifts).
    static func nextPak(_ previous: [UInt8]?, rng: inout SeededRandom) -> [UInt8] {
        func random(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) } }
        guard var bytes = previous else {
            let text = Array(String(repeating: "the forest keeps its secrets; ", count: 2800).utf8.prefix(80 << 10))
            return text + random(80 << 10)
        }
        for _ in 0..<(1 + Int(rng.next() % 3)) {
            let size = 1 + Int(rng.next() % (8 << 10))
            let at = Int(rng.next() % UInt64(bytes.count - size))
            bytes.replaceSubrange(at..<(at + size), with: random(size))
        }
        if rng.next() % 3 == 0 { bytes.insert(contentsOf: random(1024), at: Int(rng.next() % UInt64(bytes.count))) }
        return bytes
    }

    let seed: UInt64
    let fixture: Fixture
    let nginx: NginxOrigin
    /// Day 0 of the clock, to the second: a preload released on day n is released at `start` + n days.
    let start: Date
    /// The root the game shipped (version 1): every player and python-tuf start from it.
    let shippedRoot: String
    let bundlesFile: String
    let trace: Bool
    var clock: ShiftedClock
    var rng: SeededRandom
    var model: HistoryModel
    var players: [HistoryPlayer] = []
    var views: [HistoryView] = []
    /// The origin's file times before the step: what the step writes gets the clock's time.
    var times: [String: String] = [:]
    /// `channel/build@sequence` of every installable listing seen, and each channel's highest sequence of one.
    var seen: Set<String> = []
    var highWater: [String: Int] = [:]
    var keyFolders = 1
    var stepNumber = 0
    /// What the sequence exercised.
    var installs = 0
    var refusals = 0
    var releases = 0
    var uploads = 0
    /// Publishes killed in a bucket before their commit.
    var attemptsKilled = 0
    /// What the publishes' reports said the chunk store left in place and consolidated.
    var reusedChunks = 0, consolidated = 0
    /// The S3 server `upload` steps send to, started at the first; its player is `players`' last once made.
    var bucket: S3Server?
    /// For a history in a bucket: the store every publisher command works on (`fixture.origin` is then a
    /// reader's mirror of it).
    let store: HistoryBucket?

    init(seed: UInt64, inBucket: Bool = false) throws {
        self.seed = seed
        rng = SeededRandom(seed: seed)
        start = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        fixture = try Fixture()
        clock = try ShiftedClock(file: inBucket ? fixture.directory + "/clock" : nil)
        store = inBucket ? try HistoryBucket(fixture: fixture, clock: clock) : nil
        nginx = try NginxOrigin(root: fixture.directory)
        shippedRoot = fixture.directory + "/shipped-root.json"
        try FileManager.default.copyItem(atPath: fixture.origin + "/metadata/1.root.json", toPath: shippedRoot)
        bundlesFile = fixture.directory + "/bundles.json"
        try Data(
            #"{"bundles": [{"name": "hd", "required": false, "priority": 1, "paths": ["hd/**"]}, {"name": "base", "required": true, "priority": 0, "paths": ["**"]}]}"#
                .utf8
        ).write(to: URL(fileURLWithPath: bundlesFile))
        trace = ProcessInfo.processInfo.environment["PATCHSYNC_HISTORY_TRACE"] != nil
        let keys = fixture.keyDirectory
        model = HistoryModel(
            keys: HistoryKeys(root: keys + "/root.key", targets: keys + "/targets.key", online: keys + "/online.key"))
        for channel in HistoryModel.channels {
            for follows in [true, false] {
                let player = HistoryPlayer(
                    channel: channel, follows: follows,
                    root: fixture.directory + "/\(channel)-\(follows ? "follower" : "laggard")")
                let created = try CLI.run([
                    "init", "--install", player.root, "--remote", nginx.url + "/origin", "--root", shippedRoot,
                    "--channel", channel
                ])
                guard created.status == 0 else {
                    throw HistorySetupError(description: "init of the \(player.name) player: \(created.stderr)")
                }
                players.append(player)
            }
        }
    }

    // MARK: sequences

    /// A random history: a first publish on live, then 10 to 14 weighted steps.
    static func generate(seed: UInt64) -> [HistoryOp] {
        var rng = SeededRandom(seed: seed ^ 0x4157_0E11_5EED)
        let weighted: [(Int, (inout SeededRandom) -> HistoryOp)] = [
            (5, { .publish(channel: Self.channel(&$0), bundles: $0.next() % 2 == 0) }),
            (
                3,
                {
                    .preload(
                        channel: Self.channel(&$0), releaseIn: [1, 2, 5, 30][Int($0.next() % 4)],
                        bundles: $0.next() % 2 == 0)
                }
            ),
            (2, { Self.promotion(&$0) }),
            (2, { .rollback(channel: Self.channel(&$0)) }),
            (2, { .withdraw(channel: Self.channel(&$0), pick: Int($0.next() % 8)) }),
            (2, { Self.pruning(&$0) }),
            (1, { .release(channel: Self.channel(&$0)) }),
            (1, { _ in .refresh }),
            (1, { Self.renewal(&$0) }),
            (1, { .rotateRoot(HistoryRotation.allCases[Int($0.next() % 4)]) }),
            (3, { .advance(days: [1, 1, 3, 6, 8, 31, 120, 400, 800][Int($0.next() % 9)]) }),
            (2, { .catchUp(channel: Self.channel(&$0)) }),
            (1, { .syncKilled(channel: Self.channel(&$0)) }),
            (2, { _ in .upload })
        ]
        let total = weighted.reduce(0) { $0 + $1.0 }
        var ops: [HistoryOp] = [.publish(channel: "live", bundles: true)]
        for _ in 0..<(10 + Int(rng.next() % 5)) {
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

    static func channel(_ rng: inout SeededRandom) -> String { rng.next() % 3 == 0 ? "beta" : "live" }

    static func promotion(_ rng: inout SeededRandom) -> HistoryOp {
        let toBeta = rng.next() % 4 == 0
        return .promote(from: toBeta ? "live" : "beta", to: toBeta ? "beta" : "live", pick: Int(rng.next() % 4))
    }

    static func pruning(_ rng: inout SeededRandom) -> HistoryOp {
        let keep = 1 + Int(rng.next() % 3), grace = [0, 1, 7, 30][Int(rng.next() % 4)]
        // From the 4th unlink: the faketime wrapper's own are counted apart, per process.
        return .prune(keep: keep, graceDays: grace, killAtUnlink: rng.next() % 2 == 0 ? 4 + Int(rng.next() % 9) : nil)
    }

    static func renewal(_ rng: inout SeededRandom) -> HistoryOp {
        switch rng.next() % 3 {
        case 0: return .renew(root: true, targets: false)
        case 1: return .renew(root: false, targets: true)
        default: return .renew(root: true, targets: true)
        }
    }

    /// Runs `ops`; the first broken promise, or nil.
    mutating func run(_ ops: [HistoryOp]) throws -> String? {
        for (index, op) in ops.enumerated() {
            stepNumber = index + 1
            if trace {
                let listing = HistoryModel.channels.map { "\($0): \(model.listed($0).map(\.summary))" }.joined(
                    separator: "; ")
                print("seed \(seed) step \(stepNumber), day \(model.day): \(op); \(listing)")
            }
            times = FileTimes.read(fixture.origin)
            if let broken = try perform(op) { return "step \(stepNumber) (\(op)), day \(model.day): \(broken)" }
            if let store, let broken = try store.mirror(clock) {
                return "after step \(stepNumber) (\(op)), day \(model.day): \(broken)"
            }
            if let broken = try check(after: op) {
                return "after step \(stepNumber) (\(op)), day \(model.day): \(broken)"
            }
        }
        return nil
    }

    /// Shortens a failing sequence one step at a time while it still fails (each try in a fresh world).
    static func shrink(seed: UInt64, _ ops: [HistoryOp], failure: String, inBucket: Bool) throws -> (
        ops: [HistoryOp], failure: String
    ) {
        var best = (ops: ops, failure: failure)
        var index = best.ops.count - 1
        while index >= 0 {
            var candidate = best.ops
            candidate.remove(at: index)
            var run = try HistoryRun(seed: seed, inBucket: inBucket)
            if let failed = try run.run(candidate) { best = (candidate, failed) }
            index = min(index, best.ops.count) - 1
        }
        return best
    }

    // MARK: commands

    /// The repository as the checks read it: the origin folder, or the mirror of the bucket.
    private var origin: String { fixture.origin }
    /// The repository as publisher commands name it: the origin folder, or the bucket.
    private var repository: String { store?.url ?? fixture.origin }
    private var signing: [String] { ["--targets-key", model.keys.targets, "--online-key", model.keys.online] }

    /// Runs `patchsync ARGS…` at the model's day.
    private func patchsync(_ arguments: [String], environment: [String: String] = [:], killAtUnlink: Int? = nil) throws
        -> CLI.Result
    {
        var arguments = arguments, environment = environment
        if let store, arguments.contains(store.url) {
            arguments += store.arguments(machine: stepNumber % 2)
            environment.merge(store.environment) { $1 }
        }
        let result = try clock.run(CLI.executable, arguments, environment: environment, killAtUnlink: killAtUnlink)
        if trace { print("  patchsync \(arguments.joined(separator: " ")) → \(result.status)\n\(result.stdout)") }
        return result
    }

    /// Gives the files the step wrote into the origin folder the clock's time (libfaketime leaves file
    /// times to the kernel). A bucket's mirror needs none: its metadata carries the times the bucket got it.
    private func stampTimes() throws {
        if store == nil { try FileTimes.stamp(origin, since: times, at: clock.now) }
    }

    /// Whether `result` is a command killed (SIGKILL, by strace or a crash point): the wrapper reports a
    /// failure, and nothing is printed after the kill (a command that fails prints its error).
    static func wasKilled(_ result: CLI.Result) -> Bool { result.status != 0 && !result.stdout.contains("error") }

    /// What a command printed last (stdout and stderr), for a failure message.
    private func tail(_ result: CLI.Result) -> String { String((result.stdout + result.stderr).suffix(900)) }

    /// nil when `result` is the refusal (64) the model predicts for `why`.
    private func refused(_ result: CLI.Result, _ why: String) -> String? {
        result.status == 64
            ? nil : "exited \(result.status); the model predicts a refusal (64): \(why): \(tail(result))"
    }

    /// nil when `result` succeeded.
    private func succeeded(_ result: CLI.Result, _ what: String) -> String? {
        result.status == 0 ? nil : "\(what) exited \(result.status) (0 expected): \(tail(result))"
    }

    /// The JSON objects among the lines a command printed.
    private static func jsonObjects(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").filter { $0.hasPrefix("{") }.compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// Carries out one step and checks its outcome against the model's prediction.
    private mutating func perform(_ op: HistoryOp) throws -> String? {
        switch op {
        case .publish(let channel, let bundles): return try publish(on: channel, bundles: bundles, releaseIn: nil)
        case .preload(let channel, let days, let bundles):
            return try publish(on: channel, bundles: bundles, releaseIn: days)
        case .promote(let from, let to, let pick): return try promote(from: from, to: to, pick: pick)
        case .rollback(let channel): return try rollback(channel)
        case .withdraw(let channel, let pick): return try withdraw(on: channel, pick: pick)
        case .prune(let keep, let grace, let kill): return try prune(keep: keep, graceDays: grace, killAtUnlink: kill)
        case .release(let channel):
            guard let entry = model.pending(channel).first else { return nil }
            let result = try patchsync(
                [
                    "repo", "release", "\(entry.build)", "--channel", channel, "--origin", repository, "--online-key",
                    model.keys.online, "--json"
                ])
            if let broken = succeeded(result, "repo release of pending preload \(entry.build)") { return broken }
            model.markReleased(entry.build, on: channel)
            releases += 1
            return nil
        case .refresh: return try refresh()
        case .renew(let root, let targets):
            var arguments = ["repo", "renew", "--origin", repository]
            if root { arguments += ["--root-key", model.keys.root] }
            if targets { arguments += signing }
            return succeeded(try patchsync(arguments), "repo renew")
        case .rotateRoot(let rotation): return try rotate(rotation)
        case .advance(let days): return try advance(days: days)
        case .upload:
            guard let store else { return try upload() }
            // In a bucket, the user deletes the cache of the machine that acts next, by hand.
            try store.wipe(machine: (stepNumber + 1) % 2)
            uploads += 1
            return nil
        case .catchUp(let channel):
            guard let index = players.firstIndex(where: { $0.channel == channel && !$0.follows }) else { return nil }
            return try update(index)
        case .syncKilled(let channel):
            guard let player = players.first(where: { $0.channel == channel && !$0.follows }) else { return nil }
            let result = try patchsync(
                ["sync", "--install", player.root, "--quiet"], environment: ["PATCHSYNC_CRASH_AT": "batchWritten"])
            // Done before its first batch (nothing to fetch), no build on the channel yet, or killed (no error printed).
            let empty = model.listed(channel).isEmpty, withdrawn = model.withdrawnRecord.contains(channel)
            let fine =
                result.status == 0 || (empty && result.status == (withdrawn ? 75 : 69))
                || !result.stdout.contains("error")
            return fine ? nil : "the \(player.name) player's sync exited \(result.status): \(tail(result))"
        }
    }

    /// The next build, written from the last one (files changed, added and removed, modes, links and
    /// empty folders), published at once or, with `releaseIn`, as a preload. A build published at once
    /// while a preload of its channel is pending lists the preload again above it.
    private mutating func publish(on channel: String, bundles: Bool, releaseIn: Int?) throws -> String? {
        let number = model.builds.count + 1
        var build = ModelBuild.next(after: model.builds.last, number: number, rng: &rng)
        for (path, file) in build.files where file.bytes.count > Self.largestFile {
            build.files[path]?.bytes = Array(file.bytes.prefix(Self.largestFile))
        }
        build.files[Self.pak] = (Self.nextPak(model.builds.last?.files[Self.pak]?.bytes, rng: &rng), 0o644)
        model.builds.append(build)
        let folder = fixture.directory + "/history-build-\(number)"
        try build.write(to: folder)
        // --replace-most: a build of this history may drop most of the files of the one before, on purpose.
        var arguments =
            [
                "publish", folder, "--origin", repository, "--build-id", "\(number)", "--channel", channel,
                "--replace-most", "--json"
            ] + Self.chunkStore + signing
        if bundles { arguments += ["--bundles", bundlesFile] }
        var releaseDay: Int?
        if let releaseIn {
            let day = max(model.day + releaseIn, (model.pending(channel).compactMap(\.releaseDay).max() ?? 0) + 1)
            releaseDay = day
            arguments += ["--release-at", TUFDate.format(start.addingTimeInterval(TimeInterval(day) * 86400))]
        }
        let waiting = releaseDay == nil ? model.pendingAbove(channel) : []
        if let broken = try killedAttempt(arguments) { return broken }
        let result = try patchsync(arguments)
        if let broken = succeeded(result, "publish of build \(number)") { return broken }
        if let line = result.stdout.split(separator: "\n").last,
            let report = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        {
            reusedChunks += report["reusedChunks"] as? Int ?? 0
            consolidated += (report["consolidatedFiles"] as? [String])?.count ?? 0
        }
        model.list(HistoryEntry(build: number, order: 0, releaseDay: releaseDay), on: channel, above: waiting)
        model.committed()
        return nil
    }

    /// In a bucket, a publish at an even step is first tried on the other machine and killed: with its
    /// work stored, or with its metadata sent but not committed. Nothing it did may show: the bucket still
    /// lists what the model lists (the mirror is checked at once), and the publish that follows lands.
    private mutating func killedAttempt(_ arguments: [String]) throws -> String? {
        guard let store, stepNumber % 2 == 0 else { return nil }
        let point = stepNumber % 4 == 0 ? "publishStored" : "bucketMetadataSent"
        let killed = try clock.run(
            CLI.executable, arguments + store.arguments(machine: (stepNumber + 1) % 2),
            environment: store.environment.merging(["PATCHSYNC_CRASH_AT": point]) { $1 })
        guard Self.wasKilled(killed) else {
            return "a publish to be killed at \(point) was not killed there: exited \(killed.status): \(tail(killed))"
        }
        attemptsKilled += 1
        if let broken = try store.mirror(clock) { return broken }
        if let difference = try listingDifference() { return "after a publish killed at \(point): \(difference)" }
        return nil
    }

    /// `repo promote`: refused for a preload (its content is sealed with a key of its channel); a no-op when
    /// the build is that channel's newest; the pending preloads of the channel promoted to go above it.
    private mutating func promote(from: String, to: String, pick: Int) throws -> String? {
        let listed = model.listed(from)
        guard !listed.isEmpty else { return nil }
        let entry = listed[pick % listed.count]
        let result = try patchsync(
            ["repo", "promote", "\(entry.build)", "--from", from, "--to", to, "--origin", repository, "--json"]
                + signing)
        if entry.releaseDay != nil {
            refusals += 1
            return refused(result, "build \(entry.build) of \(from) is a preload, sealed with a key of \(from)")
        }
        if model.listed(to).first?.build == entry.build {
            return succeeded(result, "promote of \(to)'s newest build (nothing to do)")
        }
        if let broken = succeeded(result, "promote of build \(entry.build)") { return broken }
        model.list(HistoryEntry(build: entry.build, order: 0), on: to, above: model.pendingAbove(to))
        model.committed()
        return nil
    }

    /// `repo rollback`: the newest earlier installable build (a released preload too) that no rollback left
    /// goes back on as the newest, and the build the channel left is marked; refused without one. The
    /// channel's pending preloads go above it.
    private mutating func rollback(_ channel: String) throws -> String? {
        let result = try patchsync(
            [
                "repo", "rollback", "--channel", channel, "--reason", "history step \(stepNumber)", "--origin",
                repository,
                "--json"
            ] + signing)
        guard let current = model.current(channel) else {
            refusals += 1
            return refused(result, "channel \(channel) lists no installable build")
        }
        let listed = model.listed(channel)
        let left = Set(listed.compactMap(\.rollbackFrom) + listed.filter(\.withdrawn).map(\.build))
        guard
            let chosen = listed.first(where: {
                $0.installable && $0.order < current.order && $0.build != current.build && !left.contains($0.build)
            })
        else {
            refusals += 1
            return refused(result, "channel \(channel) lists no earlier build that no rollback left")
        }
        if let broken = succeeded(result, "rollback of \(channel) to build \(chosen.build)") { return broken }
        model.list(chosen, on: channel, rollbackFrom: current.build, above: model.pendingAbove(channel))
        model.markWithdrawn(current.build, on: channel)
        model.committed()
        return nil
    }

    /// `repo withdraw`: a pending preload or any build but the current one is unlisted; the current one
    /// is replaced by the newest earlier installable build (a released preload too) no rollback marked, listed
    /// again as the newest with the pending preloads above it, as a rollback; or, with none, simply unlisted,
    /// and the channel's record tells players why. A pending preload that a newer one shares sealed objects
    /// with is refused.
    private mutating func withdraw(on channel: String, pick: Int) throws -> String? {
        let listed = model.listed(channel)
        let build = listed.isEmpty ? model.builds.count : listed[pick % listed.count].build
        guard build > 0 else { return nil }
        let result = try patchsync(
            [
                "repo", "withdraw", "\(build)", "--channel", channel, "--reason", "history step \(stepNumber)",
                "--origin", repository, "--json"
            ]
                + signing)
        guard let entry = listed.first(where: { $0.build == build }) else {
            refusals += 1
            return refused(result, "channel \(channel) lists no build \(build)")
        }
        if entry.pending {
            // Whether a newer preload shares objects sealed with its key depends on the files: either is right.
            if result.status == 64 && listed.contains(where: { $0.pending && $0.order > entry.order }) {
                refusals += 1
                return nil
            }
            if let broken = succeeded(result, "withdrawal of pending preload \(build)") { return broken }
            model.unlist(build, from: channel)
            model.committed()
            return nil
        }
        guard build == model.current(channel)?.build else {
            if let broken = succeeded(result, "withdrawal of build \(build), not the current one") { return broken }
            model.unlist(build, from: channel)
            model.committed()
            return nil
        }
        guard
            let earlier = listed.first(where: {
                $0.installable && $0.order < entry.order && $0.build != build && !$0.withdrawn
            })
        else {
            if let broken = succeeded(result, "withdrawal of build \(build), the only installable one") {
                return broken
            }
            model.unlist(build, from: channel)
            // What stays listed must never look like a rollback: the installable builds below it go too.
            for other in listed where other.installable && other.build != build {
                model.unlist(other.build, from: channel)
            }
            model.committed(emptying: channel)
            return nil
        }
        if let broken = succeeded(result, "withdrawal of current build \(build) (back to \(earlier.build))") {
            return broken
        }
        let waiting = model.pendingAbove(channel)
        model.unlist(build, from: channel)
        model.list(earlier, on: channel, rollbackFrom: build, above: waiting)
        model.committed()
        return nil
    }

    /// `repo prune`: unlists the installable builds beyond the newest `keep` of each channel; what a view
    /// older than the grace needs may go. Killed half way through its deletions, the next one goes on.
    private mutating func prune(keep: Int, graceDays: Int, killAtUnlink: Int?) throws -> String? {
        let listed = model.entries
        model.unlistBeyond(keep: keep)
        for index in views.indices where views[index].day <= model.day - graceDays { views[index].covered = false }
        if model.entries != listed {
            // libfaketime leaves file times to the kernel: the targets version a prune signs would read as
            // written `offset` ago, so the version before it as gone long ago, whatever the grace. So a first
            // prune, with a grace no version is older than, unlists the builds beyond --keep (and deletes
            // nothing any version on disk lists); what it wrote gets the clock's time; then the prune runs with
            // its grace on a repository whose every file reads the time it was written at, as on a real machine.
            let unlisting = try patchsync(
                ["repo", "prune", "--origin", repository, "--keep", "\(keep)", "--grace", "36500d", "--json"] + signing)
            if let broken = succeeded(
                unlisting, "repo prune --keep \(keep) --grace 36500d (the unlisting half of this step's prune)")
            {
                return broken
            }
            try stampTimes()
            times = FileTimes.read(origin)
            model.committed()
        }
        let result = try patchsync(
            [
                "repo", "prune", "--origin", repository, "--keep", "\(keep)", "--grace",
                graceDays == 0 ? "0" : "\(graceDays)d", "--json"
            ] + signing,
            killAtUnlink: killAtUnlink)
        let killed = killAtUnlink != nil && Self.wasKilled(result)
        return result.status == 0 || killed ? nil : "repo prune exited \(result.status): \(tail(result))"
    }

    /// `repo refresh` (the cron job): re-signs snapshot and timestamp and releases every pending preload
    /// whose day has come, oldest first.
    private mutating func refresh() throws -> String? {
        var due: [(channel: String, build: Int)] = []
        for channel in HistoryModel.channels {
            due += model.pending(channel).filter { ($0.releaseDay ?? Int.max) <= model.day }.map {
                (channel: channel, build: $0.build)
            }
        }
        let result = try patchsync([
            "repo", "refresh", "--origin", repository, "--online-key", model.keys.online, "--json"
        ])
        let names = due.map { "\($0.channel)/\($0.build)" }
        if let broken = succeeded(result, "repo refresh (due for release: \(names))") { return broken }
        let released = Self.jsonObjects(result.stdout).last?["released"] as? [String] ?? []
        guard Set(released) == Set(names) else {
            return "repo refresh released \(released.sorted()); due were \(names.sorted())"
        }
        for (channel, build) in due { model.markReleased(build, on: channel) }
        releases += due.count
        return nil
    }

    /// New keys from `keygen` for the roles `rotation` names, then `repo rotate-root` to them.
    private mutating func rotate(_ rotation: HistoryRotation) throws -> String? {
        keyFolders += 1
        let folder = fixture.directory + "/keys-\(keyFolders)"
        if let broken = succeeded(try patchsync(["keygen", "--out", folder]), "keygen") { return broken }
        var arguments = ["repo", "rotate-root", "--origin", repository, "--root-key", model.keys.root, "--json"]
        var keys = model.keys
        switch rotation {
        case .root:
            arguments += ["--new-root-key", folder + "/root.key"]
            keys.root = folder + "/root.key"
        case .online:
            // The releases role is the online key's: its new key takes it over with a targets signature.
            arguments += ["--new-online-key", folder + "/online.key", "--targets-key", model.keys.targets]
            keys.online = folder + "/online.key"
        case .targets:
            arguments += ["--new-targets-key", folder + "/targets.key", "--online-key", model.keys.online]
            keys.targets = folder + "/targets.key"
        case .all:
            arguments += [
                "--new-root-key", folder + "/root.key", "--new-targets-key", folder + "/targets.key",
                "--new-online-key", folder + "/online.key"
            ]
            keys = HistoryKeys(
                root: folder + "/root.key", targets: folder + "/targets.key", online: folder + "/online.key")
        }
        if let broken = succeeded(try patchsync(arguments), "repo rotate-root (\(rotation.rawValue))") { return broken }
        model.keys = keys
        return nil
    }

    /// The clock moves on, and the publisher's routine runs as the help pages describe it: the refresh
    /// job, then `repo check --within 30d`, then the renewal it names (root, targets).
    private mutating func advance(days: Int) throws -> String? {
        model.day += days
        try clock.advance(days: days)
        // The monitoring of the days passed: what repo check found due among root and targets (which the
        // refresh job cannot sign, and fails on once expired) is renewed before the refresh job runs.
        let before = try patchsync(["repo", "check", "--origin", repository, "--within", "30d", "--json"])
        if before.status == 65, let found = Self.jsonObjects(before.stdout).first(where: { $0["due"] != nil }) {
            let due = Set(((found["due"] as? [[String: Any]]) ?? []).compactMap { $0["role"] as? String }).intersection(
                ["root", "targets"])
            if !due.isEmpty {
                var renew = ["repo", "renew", "--origin", repository]
                if due.contains("root") { renew += ["--root-key", model.keys.root] }
                if due.contains("targets") { renew += signing }
                if let broken = succeeded(
                    try patchsync(renew), "repo renew of \(due.sorted()) found due after \(days) days")
                {
                    return broken
                }
            }
        }
        if let broken = try refresh() { return "the refresh job: \(broken)" }
        let check = try patchsync([
            "repo", "check", "--origin", repository, "--within", "30d", "--online-within", "2d", "--json"
        ])
        guard check.status != 0 else { return nil }
        guard check.status == 65, let found = Self.jsonObjects(check.stdout).first(where: { $0["due"] != nil }) else {
            return "repo check exited \(check.status): \(tail(check))"
        }
        let due = Set(((found["due"] as? [[String: Any]]) ?? []).compactMap { $0["role"] as? String })
        let problems = (found["builds"] as? [[String: Any]]) ?? []
        guard problems.isEmpty, due.isSubset(of: ["root", "targets"]) else {
            return
                "right after the refresh job, repo check finds \(due.sorted()) due and listed builds to fix: \(tail(check))"
        }
        var renew = ["repo", "renew", "--origin", repository]
        if due.contains("root") { renew += ["--root-key", model.keys.root] }
        if due.contains("targets") { renew += signing }
        return succeeded(try patchsync(renew), "repo renew of \(due.sorted()), which repo check asked for")
    }

    // MARK: invariants

    /// The promises that hold after every step.
    private mutating func check(after op: HistoryOp) throws -> String? {
        try stampTimes()
        if let broken = try checkListing() { return broken }
        if let broken = try checkKeys() { return broken }
        if let broken = try checkContent() { return broken }
        let check = try patchsync(["repo", "check", "--origin", repository, "--within", "30d", "--online-within", "2d"])
        if check.status != 0 {
            return
                "repo check (nothing due within 30 days, snapshot and timestamp within 2, no listed build to fix) exited \(check.status): \(tail(check))"
        }
        if let broken = try checkPythonTUF() { return broken }
        for index in players.indices where players[index].follows {
            if let broken = try update(index) { return broken }
        }
        if let broken = try checkReleasable() { return broken }
        if case .prune = op, let broken = try checkGrace() { return broken }
        try recordView()
        return nil
    }

    /// The first difference between what the channels list and what the model lists, or nil.
    private func listingDifference() throws -> String? {
        let repo: Repository
        do { repo = try Repository.load(origin: origin) } catch {
            return "the origin's metadata does not load: \(error)"
        }
        for channel in HistoryModel.channels {
            let listed = repo.targetFiles.values.compactMap(\.custom).filter { $0.channel == channel }.sorted {
                $0.sequence > $1.sequence
            }
            let actual = listed.map {
                HistoryEntry.summary(
                    build: $0.buildId, preload: $0.preload != nil,
                    released: repo.isReleased(channel: channel, build: $0.buildId),
                    withdrawn: $0.withdrawn == true, rollbackFrom: $0.rollback?.from)
            }
            let expected = model.listed(channel).map(\.summary)
            if actual != expected {
                return "channel \(channel) lists \(actual), newest first; the model lists \(expected)"
            }
        }
        let keys = Set(repo.releasedKeys.keys), expected = Set(model.released.map { "releases/\($0).key" })
        return keys == expected
            ? nil : "the releases role lists \(keys.sorted()); the model released \(expected.sorted())"
    }

    /// The channels list what the model lists, and every installable build newly listed has a sequence
    /// above any installable build its channel listed before (players refuse a lower one as a rollback).
    private mutating func checkListing() throws -> String? {
        if let difference = try listingDifference() { return difference }
        let repo = try Repository.load(origin: origin)
        for channel in HistoryModel.channels {
            let high = highWater[channel] ?? 0
            let installable = repo.targetFiles.values.compactMap(\.custom).filter {
                $0.channel == channel && ($0.preload == nil || repo.isReleased(channel: channel, build: $0.buildId))
            }
            for info in installable
            where seen.insert("\(channel)/\(info.buildId)@\(info.sequence)").inserted && info.sequence <= high {
                return
                    "build \(info.buildId) is listed on \(channel) with sequence \(info.sequence), not above \(high), which players of \(channel) may already have staged: they refuse it as a rollback"
            }
            highWater[channel] = max(high, installable.map(\.sequence).max() ?? 0)
        }
        return nil
    }

    /// Nothing a listed build or a preload needs is deleted: every plain build a channel lists (the current
    /// one, and those a rollback or a withdrawal may put back) has its manifest, objects, delta packs and
    /// manifest deltas in the origin, and every listed preload its plan, sealed manifest, sealed objects
    /// and the plain objects it shares.
    private func checkContent() throws -> String? {
        let repo = try Repository.load(origin: origin)
        for (path, file) in repo.targetFiles.sorted(by: { $0.key < $1.key }) where file.custom != nil {
            let needs: Set<String>
            if file.custom?.preload != nil {
                guard let planNeeds = Self.preloadNeeds(origin, path, file) else {
                    return "the preload plan of \(path) cannot be read"
                }
                needs = planNeeds
            } else {
                do { needs = try PruneTests.needs(origin, path, file) } catch {
                    return "listed build \(path): its manifest cannot be read: \(error)"
                }
            }
            let missing = needs.filter { !FileManager.default.fileExists(atPath: origin + "/" + $0) }
            if !missing.isEmpty { return "listed build \(path) lacks \(missing.sorted().prefix(4)) in the origin" }
        }
        return nil
    }

    /// What preload target `target` needs in `origin`, read from its plan (gzip'd JSON) apart from the
    /// library: the plan itself, its sealed manifest, its sealed objects and the plain objects it shares.
    private static func preloadNeeds(_ origin: String, _ target: String, _ file: TargetFile) -> Set<String>? {
        guard let hash = file.hashes["sha256"], let slash = target.lastIndex(of: "/") else { return nil }
        let plan = "targets/\(target[...slash])\(hash).\(target[target.index(after: slash)...])"
        guard let json = try? CLI.runProgram("/bin/gzip", ["-dc", origin + "/" + plan]), json.status == 0,
            let fields = try? JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        else { return nil }
        var objects = ((fields["objects"] as? [[String: Any]]) ?? []).compactMap { $0["sealed"] as? String }
        objects += (fields["sharedObjects"] as? [String]) ?? []
        if let sealed = (fields["manifest"] as? [String: Any])?["sealed"] as? String { objects.append(sealed) }
        return Set([plan] + objects.map { "objects/\($0.prefix(2))/\($0).bin" })
    }

    /// No key is lost: the root names the keys the publisher holds, targets delegates the releases role
    /// to the online key, and every pending preload's content key is in one of the publisher's key folders.
    private func checkKeys() throws -> String? {
        let metadata = origin + "/metadata/"
        guard let root = Self.signed(metadata + "root.json"), let roles = root["roles"] as? [String: Any] else {
            return "metadata/root.json does not parse"
        }
        func ids(_ role: String) -> [String] { ((roles[role] as? [String: Any])?["keyids"] as? [String]) ?? [] }
        for (role, file) in [
            ("root", model.keys.root), ("targets", model.keys.targets), ("timestamp", model.keys.online),
            ("snapshot", model.keys.online)
        ] {
            let id = try SigningKey.load(path: file).publicKey.keyID()
            if ids(role) != [id] {
                return "the root names \(ids(role)) for \(role); the publisher's key \(file) is \(id)"
            }
        }
        if let targets = Self.currentTargets(metadata), let delegations = targets["delegations"] as? [String: Any],
            let releases = (delegations["roles"] as? [[String: Any]])?.first(where: {
                $0["name"] as? String == "releases"
            })
        {
            let online = try SigningKey.load(path: model.keys.online).publicKey.keyID()
            if releases["keyids"] as? [String] != [online] {
                return
                    "targets delegates the releases role to \(releases["keyids"] ?? "nothing"); the online key is \(online)"
            }
        }
        let folders = (1...keyFolders).map { fixture.directory + ($0 == 1 ? "/keys" : "/keys-\($0)") + "/content" }
        for channel in HistoryModel.channels {
            for entry in model.pending(channel)
            where !folders.contains(where: {
                FileManager.default.fileExists(atPath: "\($0)/\(channel)/\(entry.build).key")
            }) {
                return
                    "the content key of pending preload \(entry.build) of \(channel) is in none of the publisher's key folders"
            }
        }
        return nil
    }

    /// The `signed` part of a metadata file.
    private static func signed(_ path: String) -> [String: Any]? {
        guard let data = FileManager.default.contents(atPath: path),
            let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return nil }
        return json["signed"] as? [String: Any]
    }

    /// The version `signed` (timestamp or snapshot metadata) gives role file `name`.
    private static func version(_ signed: [String: Any], _ name: String) -> Int? {
        ((signed["meta"] as? [String: Any])?[name] as? [String: Any])?["version"] as? Int
    }

    /// The targets metadata that timestamp.json of `metadata` leads to.
    private static func currentTargets(_ metadata: String) -> [String: Any]? {
        guard let stamp = Self.signed(metadata + "timestamp.json"), let snapshot = Self.version(stamp, "snapshot.json"),
            let snap = Self.signed(metadata + "\(snapshot).snapshot.json"),
            let targets = Self.version(snap, "targets.json")
        else { return nil }
        return Self.signed(metadata + "\(targets).targets.json")
    }

    /// python-tuf's long-lived client refreshes and downloads every target of targets and releases: exactly
    /// the builds the model lists and the keys it released.
    private func checkPythonTUF() throws -> String? {
        let result = try clock.run(
            Self.python,
            [
                Self.client, nginx.url + "/origin/metadata/", nginx.url + "/origin/targets/", shippedRoot,
                fixture.directory + "/tuf-cache"
            ])
        if trace { print("  python-tuf → \(result.status)\n\(result.stdout)") }
        guard result.status == 0, let report = Self.jsonObjects(result.stdout).last else {
            return "python-tuf's client (its cache kept since step 1) failed, exit \(result.status): \(tail(result))"
        }
        let downloaded = Set(report["targets"] as? [String] ?? [])
        var expected = Set(model.released.map { "releases/\($0).key" })
        for channel in HistoryModel.channels {
            for entry in model.listed(channel) { expected.insert("manifests/\(channel)/\(entry.build).json.gz") }
            if model.hasRecord(channel) { expected.insert("channels/\(channel).json") }
        }
        return downloaded == expected
            ? nil : "python-tuf downloaded \(downloaded.sorted()); the model lists \(expected.sorted())"
    }

    /// Player `index` syncs and applies; its live tree is then exactly its channel's current build (or,
    /// with none, the one it had). Nothing to sync when the channel lists nothing (69; 75 when a withdraw
    /// emptied it, its record telling why); nothing to apply
    /// while a preload is pending (75, or 65 for a preload record left from a channel that lists nothing).
    private mutating func update(_ index: Int) throws -> String? {
        let player = players[index]
        let listed = model.listed(player.channel)
        let sync = try patchsync(["sync", "--install", player.root, "--quiet"])
        // A channel a withdraw emptied says so (75, reason withdrawn); one that never listed a build: 69.
        let expected: Int32 = listed.isEmpty ? (model.withdrawnRecord.contains(player.channel) ? 75 : 69) : 0
        if sync.status != expected {
            return "the \(player.name) player's sync exited \(sync.status) (\(expected) expected): \(tail(sync))"
        }
        let apply = try patchsync(["apply", "--install", player.root])
        let waiting: Set<Int32> =
            listed.isEmpty ? [0, 65, 75] : model.pendingAbove(player.channel).isEmpty ? [0] : [0, 75]
        if !waiting.contains(apply.status) {
            return
                "the \(player.name) player's apply exited \(apply.status) (\(waiting.sorted()) expected): \(tail(apply))"
        }
        if let current = model.current(player.channel) {
            if players[index].installed != current.build { installs += 1 }
            players[index].installed = current.build
        }
        return try compare(player.root, with: players[index].installed, what: "the \(player.name) player")
    }

    /// `patchsync upload` of the origin to the S3 server; then a player of live that
    /// reads only the bucket syncs and applies, and holds live's current build byte for byte.
    private mutating func upload() throws -> String? {
        if bucket == nil { bucket = try S3Server() }
        guard let bucket else { return nil }
        let url = "s3://\(bucket.bucket)/history"
        // At the machine's clock: S3 refuses a request signed days away from its own.
        let sent = try CLI.run(["upload", origin, url, "--endpoint", bucket.endpoint], environment: bucket.credentials)
        if let broken = succeeded(sent, "upload") { return broken }
        uploads += 1
        let verify = try CLI.run(
            ["repo", "check", "--origin", origin, "--bucket", url, "--endpoint", bucket.endpoint],
            environment: bucket.credentials)
        if verify.status != 0 && (verify.stdout + verify.stderr).contains("lacks") {
            return "after the upload, repo check --bucket finds files missing: \(tail(verify))"
        }
        if !players.contains(where: { $0.root.hasSuffix("/bucket-player") }) {
            let root = fixture.directory + "/bucket-player"
            let created = try CLI.run(
                [
                    "init", "--install", root, "--remote", "\(bucket.endpoint)/\(bucket.bucket)/history", "--root",
                    shippedRoot, "--channel", "live"
                ])
            guard created.status == 0 else { return "init of the bucket's player: \(created.stderr)" }
            players.append(HistoryPlayer(channel: "live", follows: false, root: root))
        }
        return try update(players.count - 1)
    }

    /// nil when the live tree of `install` is build `build` byte for byte (modes, links and empty folders too).
    private func compare(_ install: String, with build: Int?, what: String) throws -> String? {
        let live = install + "/current"
        guard let build else {
            return FileManager.default.fileExists(atPath: live)
                ? "\(what) has a live tree, and its channel never listed a build to install" : nil
        }
        guard FileManager.default.fileExists(atPath: live) else {
            return "\(what) has no live tree; its channel's build is \(build)"
        }
        let differences = try ModelTree.read(live).differences(from: model.builds[build - 1].tree(hd: true))
        return differences.isEmpty ? nil : "\(what) is not build \(build) byte for byte: \(differences.prefix(6))"
    }

    /// Every pending preload can still be released: on a copy of the origin, each one is, oldest first.
    private func checkReleasable() throws -> String? {
        let pending = HistoryModel.channels.flatMap { channel in
            model.pending(channel).map { (channel: channel, build: $0.build) }
        }
        guard !pending.isEmpty else { return nil }
        let copy = fixture.directory + "/release-check"
        Self.remove(copy)
        try FileManager.default.copyItem(atPath: origin, toPath: copy)
        defer { Self.remove(copy) }
        for (channel, build) in pending {
            let result = try patchsync([
                "repo", "release", "\(build)", "--channel", channel, "--origin", copy, "--online-key", model.keys.online
            ])
            if result.status != 0 {
                return
                    "pending preload \(build) of \(channel) cannot be released (tried on a copy of the origin): \(tail(result))"
            }
        }
        return nil
    }

    private static func remove(_ path: String) {
        guard FileManager.default.fileExists(atPath: path) else { return }
        if (try? FileManager.default.removeItem(atPath: path)) == nil {
            _ = try? CLI.runProgram("/bin/chmod", ["-R", "u+w", path])
            try? FileManager.default.removeItem(atPath: path)
        }
    }

    /// After a prune: for each channel, a player that read the metadata of the oldest step that every
    /// prune since kept within its grace (and that has not expired) installs the build it read.
    private func checkGrace() throws -> String? {
        for channel in HistoryModel.channels {
            let fresh = clock.now.addingTimeInterval(3600)
            guard let view = views.first(where: { $0.covered && $0.current[channel] != nil && $0.validUntil > fresh }),
                let build = view.current[channel]
            else { continue }
            let root = view.folder + "/player-\(channel)-after-step-\(stepNumber)"
            let created = try CLI.run(
                [
                    "init", "--install", root, "--remote", nginx.url + "/views/\(view.step)", "--root", shippedRoot,
                    "--channel", channel
                ])
            if created.status != 0 { return "init of a player of the metadata of step \(view.step): \(created.stderr)" }
            let what =
                "a player that read the metadata of step \(view.step) (day \(view.day), within every prune's grace since)"
            let sync = try patchsync(["sync", "--install", root, "--quiet"])
            if sync.status != 0 {
                return "\(what) cannot install build \(build) of \(channel): sync exited \(sync.status): \(tail(sync))"
            }
            let apply = try patchsync(["apply", "--install", root])
            if apply.status != 0 && !(apply.status == 75 && view.waiting[channel] == true) {
                return "\(what): apply exited \(apply.status): \(tail(apply))"
            }
            if let broken = try compare(root, with: build, what: what) { return broken }
        }
        return nil
    }

    /// Keeps the metadata as this step left it, served beside the origin's targets and objects.
    private mutating func recordView() throws {
        let folder = fixture.directory + "/views/\(stepNumber)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: origin + "/metadata", toPath: folder + "/metadata")
        try FileManager.default.createSymbolicLink(
            atPath: folder + "/targets", withDestinationPath: origin + "/targets")
        try FileManager.default.createSymbolicLink(
            atPath: folder + "/objects", withDestinationPath: origin + "/objects")
        var current: [String: Int] = [:], waiting: [String: Bool] = [:]
        for channel in HistoryModel.channels {
            current[channel] = model.current(channel)?.build
            waiting[channel] = !model.pendingAbove(channel).isEmpty
        }
        views.append(
            HistoryView(
                step: stepNumber, day: model.day, folder: folder, validUntil: Self.validUntil(folder + "/metadata/"),
                current: current,
                waiting: waiting))
    }

    /// The earliest expiry among the metadata a client of `metadata` reads: root, timestamp, and the
    /// snapshot, targets and releases versions they lead to.
    private static func validUntil(_ metadata: String) -> Date {
        var dates: [Date] = []
        func read(_ name: String) -> [String: Any]? {
            guard let role = Self.signed(metadata + name) else { return nil }
            if let text = role["expires"] as? String, let date = TUFDate.parse(text) { dates.append(date) }
            return role
        }
        _ = read("root.json")
        if let stamp = read("timestamp.json"), let snapshot = Self.version(stamp, "snapshot.json"),
            let snap = read("\(snapshot).snapshot.json")
        {
            if let targets = Self.version(snap, "targets.json") { _ = read("\(targets).targets.json") }
            if let releases = Self.version(snap, "releases.json") { _ = read("\(releases).releases.json") }
        }
        return dates.min() ?? .distantPast
    }
}

/// A history's repository in an S3-compatible bucket: moto on loopback, its clock following the history's
/// (so requests are signed, and objects dated, at the commands' time), two publisher machines (cache
/// folders) and the mirror the checks, players and python-tuf read (`fixture.origin`, nginx serves it).
struct HistoryBucket {
    let server: S3Server
    let fixture: Fixture
    let url = "s3://game/repo"

    /// Sends the fixture's new repository to the bucket; the origin folder then becomes the mirror.
    init(fixture: Fixture, clock: ShiftedClock) throws {
        guard let file = clock.file else { throw HistorySetupError(description: "a bucket history needs a clock file") }
        server = try S3Server(clockFile: file)
        self.fixture = fixture
        let sent = try clock.run(
            CLI.executable, ["upload", fixture.origin, url, "--endpoint", server.endpoint],
            environment: server.credentials)
        guard sent.status == 0 else {
            throw HistorySetupError(description: "upload of the new repository to the bucket: \(sent.stdout)")
        }
        try FileManager.default.removeItem(atPath: fixture.origin)
        if let broken = try mirror(clock) { throw HistorySetupError(description: broken) }
    }

    /// The credentials, and a short lease, so a killed writer lets the next one in soon.
    var environment: [String: String] {
        server.credentials.merging(["PATCHSYNC_BUCKET_LEASE_SECONDS": "5"]) { $1 }
    }

    func cache(_ machine: Int) -> String { fixture.directory + "/machine-\(machine)" }

    /// What a publisher command on `machine` adds to `--origin s3://…`.
    func arguments(machine: Int) -> [String] {
        ["--endpoint", server.endpoint, "--cache", cache(machine), "--wait", "2m"]
    }

    /// Brings the mirror to the bucket's state, as a reader (no lease); nil when it did.
    func mirror(_ clock: ShiftedClock) throws -> String? {
        let result = try clock.run(
            CLI.executable,
            ["repo", "status", "--origin", url, "--endpoint", server.endpoint, "--cache", fixture.origin, "--json"],
            environment: server.credentials)
        return result.status == 0
            ? nil : "mirroring the bucket (repo status) exited \(result.status): \(result.stdout.suffix(600))"
    }

    /// The user deletes `machine`'s cache folder by hand (it may not exist yet).
    func wipe(machine: Int) throws {
        guard FileManager.default.fileExists(atPath: cache(machine)) else { return }
        try FileManager.default.removeItem(atPath: cache(machine))
    }
}
