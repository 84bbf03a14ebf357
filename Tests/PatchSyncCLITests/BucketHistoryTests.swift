import Foundation
import PatchSync
import PatchSyncTestSupport
import Testing

/// One step of a bucket history: what a machine does to the repository in the bucket, or to its own cache.
enum BucketOp: CustomStringConvertible, Equatable {
    /// `machine` publishes the next build on `channel`; killed at `killAt` (a crash point) when given.
    case publish(channel: String, machine: Int, killAt: String?)
    /// `machine` promotes beta's newest build to live.
    case promote(machine: Int)
    /// `machine` prunes to the newest `keep` builds of each channel (no grace).
    case prune(keep: Int, machine: Int, killAt: String?)
    /// `machine` re-signs snapshot and timestamp.
    case refresh(machine: Int)
    /// The user deletes `machine`'s cache folder by hand, or (`part`) one of its folders.
    case wipe(machine: Int, part: String?)

    var description: String {
        switch self {
        case .publish(let channel, let machine, let kill):
            "machine \(machine) publishes on \(channel)" + (kill.map { ", killed at \($0)" } ?? "")
        case .promote(let machine): "machine \(machine) promotes beta's newest to live"
        case .prune(let keep, let machine, let kill):
            "machine \(machine) prunes to \(keep) builds" + (kill.map { ", killed at \($0)" } ?? "")
        case .refresh(let machine): "machine \(machine) refreshes"
        case .wipe(let machine, let part):
            "the user deletes machine \(machine)'s cache" + (part.map { " \($0)/" } ?? "")
        }
    }

    /// A first publish on live, then `steps - 1` weighted steps. After a killed step the other machine
    /// acts, then the killed one again: the interleaving that finds a cache trusted while it differs
    /// from the bucket.
    static func generate(seed: UInt64, steps: Int) -> [BucketOp] {
        var rng = SeededRandom(seed: seed ^ 0xB0C7_4157)
        var ops: [BucketOp] = [.publish(channel: "live", machine: 0, killAt: nil)]
        var forced: [Int] = []
        while ops.count < steps {
            let machine = forced.isEmpty ? Int(rng.next() % 2) : forced.removeFirst()
            let kill = [nil, nil, "publishStored", "bucketMetadataSent", "bucketMetadataSent"][Int(rng.next() % 5)]
            let op: BucketOp
            switch rng.next() % 10 {
            case 0...5:
                op = .publish(channel: rng.next() % 3 == 0 ? "beta" : "live", machine: machine, killAt: kill)
            case 6: op = .promote(machine: machine)
            case 7: op = .prune(keep: 1 + Int(rng.next() % 3), machine: machine, killAt: kill)
            case 8: op = .refresh(machine: machine)
            default: op = .wipe(machine: machine, part: [nil, "metadata", "objects", "targets"][Int(rng.next() % 4)])
            }
            ops.append(op)
            switch op {
            case .publish(_, _, let killed?),
                .prune(_, _, let killed?) where !killed.isEmpty:
                forced = [1 - machine, machine]
            default: break
            }
        }
        return ops
    }
}

/// What the repository should list, written apart from the library: per channel, its builds newest first.
struct BucketModel {
    var listed: [String: [String]] = ["live": [], "beta": []]
    var next = 1
    /// The build folder of each build id.
    var folders: [String: String] = [:]

    mutating func published(_ id: String, on channel: String) { listed[channel, default: []].insert(id, at: 0) }

    mutating func promoted() {
        guard let newest = listed["beta"]?.first, listed["live"]?.first != newest else { return }
        listed["live"]?.removeAll { $0 == newest }
        listed["live"]?.insert(newest, at: 0)
    }

    mutating func pruned(keep: Int) {
        for channel in listed.keys { listed[channel] = Array(listed[channel, default: []].prefix(keep)) }
    }
}

/// One history against one bucket, with two machines and players of each channel.
struct BucketHistory {
    let world: BucketWorld
    var model = BucketModel()
    let players: [String: String]

    init() throws {
        world = try BucketWorld()
        var players: [String: String] = [:]
        for channel in ["live", "beta"] {
            let root = world.fixture.directory + "/player-" + channel
            let created = try CLI.run([
                "init", "--install", root, "--remote", world.remote, "--root",
                world.cache("first") + "/metadata/1.root.json", "--channel", channel
            ])
            guard created.status == 0 else { throw BucketSetupError(description: created.stderr) }
            players[channel] = root
        }
        self.players = players
    }

    static func machine(_ index: Int) -> String { index == 0 ? "east" : "west" }

    /// Runs `ops`; the first broken promise, or nil.
    mutating func run(_ ops: [BucketOp]) throws -> String? {
        for (index, op) in ops.enumerated() {
            if let broken = try perform(op) { return "step \(index + 1) (\(op)): \(broken)" }
            if let broken = try check() { return "after step \(index + 1) (\(op)): \(broken)" }
        }
        return nil
    }

    private func command(_ arguments: [String], machine: Int, killAt: String?) throws -> CLI.Result {
        try world.patchsync(
            arguments + ["--wait", "1m", "--json"], machine: Self.machine(machine),
            extra: killAt.map { ["PATCHSYNC_CRASH_AT": $0] } ?? [:])
    }

    /// A command the model expects to land (or, killed, to change nothing).
    private func outcome(_ result: CLI.Result, killed: Bool, _ what: String) -> String? {
        if killed { return result.status == 0 ? "\(what) was to be killed and exited 0" : nil }
        return result.status == 0
            ? nil : "\(what) exited \(result.status): \((result.stdout + result.stderr).suffix(700))"
    }

    private mutating func perform(_ op: BucketOp) throws -> String? {
        switch op {
        case .publish(let channel, let machine, let killAt):
            let id = "\(model.next)"
            let folder = try world.build(id, number: model.next)
            model.next += 1
            let result = try command(
                ["publish", folder, "--build-id", id, "--channel", channel, "--keep-builds", "100", "--new-channel"]
                    + world.signing, machine: machine, killAt: killAt)
            if let broken = outcome(result, killed: killAt != nil, "publish of \(id)") { return broken }
            if killAt == nil {
                model.published(id, on: channel)
                model.folders[id] = folder
            }
        case .promote(let machine):
            guard let newest = model.listed["beta"]?.first else { return nil }
            let result = try command(
                ["repo", "promote", newest, "--from", "beta", "--to", "live", "--keep-builds", "100"] + world.signing,
                machine: machine, killAt: nil)
            if let broken = outcome(result, killed: false, "promote of \(newest)") { return broken }
            model.promoted()
        case .prune(let keep, let machine, let killAt):
            let result = try command(
                ["repo", "prune", "--keep", "\(keep)", "--grace", "0"] + world.signing, machine: machine, killAt: killAt
            )
            // A prune that re-signs nothing commits nothing, and never reaches the kill point.
            if killAt == nil || result.status == 0 {
                if let broken = outcome(result, killed: false, "prune") { return broken }
                model.pruned(keep: keep)
            }
        case .refresh(let machine):
            let result = try command(
                ["repo", "refresh", "--key", world.keys + "/online.key"], machine: machine, killAt: nil)
            return outcome(result, killed: false, "refresh")
        case .wipe(let machine, let part):
            let folder = world.cache(Self.machine(machine)) + (part.map { "/" + $0 } ?? "")
            try? FileManager.default.removeItem(atPath: folder)
        }
        return nil
    }

    /// The bucket lists what the model says, holds every file that metadata names, and each channel's
    /// player installs the newest build byte-exact.
    private func check() throws -> String? {
        let status = try world.patchsync(["repo", "status", "--json"], machine: "reader")
        guard status.status == 0,
            let line = status.stdout.split(separator: "\n").last(where: { $0.hasPrefix("{") }),
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        else { return "repo status exited \(status.status): \(status.stderr.suffix(600))" }
        for channel in ["live", "beta"] {
            let builds = ((object["channels"] as? [[String: Any]]) ?? []).first { $0["channel"] as? String == channel }
            let listed = ((builds?["builds"] as? [[String: Any]]) ?? []).compactMap { $0["buildId"] as? String }
            if listed != model.listed[channel] ?? [] {
                return "\(channel) lists \(listed), the model \(model.listed[channel] ?? [])"
            }
        }
        let check = try world.patchsync(["repo", "check", "--bucket", world.url, "--json"], machine: "reader")
        if check.status != 0 { return "repo check --bucket: \((check.stdout + check.stderr).suffix(700))" }
        for (channel, install) in players.sorted(by: { $0.key < $1.key }) {
            guard let newest = model.listed[channel]?.first, let folder = model.folders[newest] else { continue }
            let sync = try CLI.run(["sync", "--install", install, "--quiet"])
            let apply = try CLI.run(["apply", "--install", install])
            guard sync.status == 0, apply.status == 0 else {
                return "the \(channel) player's sync/apply exited \(sync.status)/\(apply.status): \(sync.stderr)"
            }
            if try treeFacts(install + "/current").mapValues(\.sha256) != treeFacts(folder).mapValues(\.sha256) {
                return "the \(channel) player's tree is not build \(newest)"
            }
        }
        return nil
    }
}

@Suite("A release history against a bucket, from two machines", .tags(.cli), .serialized)
struct BucketHistoryTests {
    static var sequences: Int { Int(ProcessInfo.processInfo.environment["PATCHSYNC_BUCKET_SEQUENCES"] ?? "") ?? 3 }
    static var baseSeed: UInt64 {
        UInt64(ProcessInfo.processInfo.environment["PATCHSYNC_BUCKET_SEED"] ?? "") ?? 20261129
    }

    @Test(
        "publish, promote, prune and refresh from two machines, some killed, caches deleted by hand: the bucket lists what the model says, holds every file its metadata names, and players install the newest build byte-exact"
    )
    func randomHistories() throws {
        var steps = 0
        for index in 0..<Self.sequences {
            let seed = Self.baseSeed &+ UInt64(index)
            let ops = BucketOp.generate(seed: seed, steps: 14)
            var run = try BucketHistory()
            steps += ops.count
            guard let failure = try run.run(ops) else { continue }
            var best = (ops: ops, failure: failure)
            var at = best.ops.count - 1
            while at >= 1 {
                var candidate = best.ops
                candidate.remove(at: at)
                var again = try BucketHistory()
                if let failed = try again.run(candidate) { best = (candidate, failed) }
                at = min(at, best.ops.count) - 1
            }
            Issue.record(
                """
                bucket history failed, seed \(seed) (PATCHSYNC_BUCKET_SEED=\(Self.baseSeed) sequence \(index)): \
                \(best.failure)
                shortest sequence: \(best.ops.map(\.description).joined(separator: "; "))
                """)
            return
        }
        print("bucket histories: \(Self.sequences) sequences, \(steps) steps, every promise held")
    }
}
