import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

/// LAN peers against random sequences: each sequence draws, from its seed, one to three peers among an
/// honest share and peers that hold nothing, answer late, trickle, stall, lie, vanish, turn after a
/// probe, redirect, have few places (503 with Retry-After past three requests at once) or always ask
/// for a moment; an origin that is healthy or answers a fifth of its object requests 503; and
/// whether the player's first sync is killed at its first batch. The player then installs beside a
/// player with no peers on the same origin. Promised: every install is byte-exact, and the peers cost
/// no more than a few seconds (3 s, and 3 s per peer) over the install without them.
///
/// `PATCHSYNC_PEER_SEQUENCES` (default 4) and `PATCHSYNC_PEER_SEED` (default a fixed base) set how much
/// runs; a failure prints the seed and what the sequence drew.
@Suite("LAN peers against random sequences", .tags(.cli), .serialized)
struct PeerSequenceTests {
    static var sequences: Int { Int(ProcessInfo.processInfo.environment["PATCHSYNC_PEER_SEQUENCES"] ?? "") ?? 4 }
    static var baseSeed: UInt64 {
        UInt64(ProcessInfo.processInfo.environment["PATCHSYNC_PEER_SEED"] ?? "") ?? 20_261_128
    }
    static let modes = [
        "honest", "empty", "late404", "slow", "stall", "flip", "vanish", "turncoat", "redirect", "crowded", "moment"
    ]

    /// What one sequence draws.
    struct Draw: CustomStringConvertible {
        var peers: [String]
        var flakyOrigin: Bool
        var killed: Bool
        var description: String {
            "peers \(peers), origin \(flakyOrigin ? "answering 20% of object requests 503" : "healthy")"
                + (killed ? ", first sync killed at its first batch" : "")
        }

        init(seed: UInt64) {
            var rng = SeededRandom(seed: seed)
            let count = 1 + Int(rng.next() % 3)
            peers = (0..<count).map { _ in
                PeerSequenceTests.modes[Int(rng.next() % UInt64(PeerSequenceTests.modes.count))]
            }
            flakyOrigin = rng.next() % 2 == 0
            killed = rng.next() % 3 == 0
        }
    }

    @Test(
        "every install through any mix of honest, empty, late, slow, stalling, lying, vanishing, turncoat and redirecting peers, a flaky origin and a kill is byte-exact, and costs at most a few seconds more than without the peers"
    )
    func randomPeers() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let (server, share) = try PeerTests.share(try player(fixture, "seed", remote: nginx.url))
        defer { server.stop() }
        for index in 0..<Self.sequences {
            let seed = Self.baseSeed + UInt64(index)
            let draw = Draw(seed: seed)
            if let broken = try run(draw, seed: seed, fixture: fixture, nginx: nginx, share: share, index: index) {
                Issue.record(
                    "peer sequence failed, seed \(seed) (PATCHSYNC_PEER_SEED=\(Self.baseSeed) sequence \(index)): \(draw): \(broken)"
                )
                return
            }
        }
    }

    /// One sequence; the broken promise, or nil.
    private func run(_ draw: Draw, seed: UInt64, fixture: Fixture, nginx: NginxOrigin, share: String, index: Int) throws
        -> String?
    {
        let flaky =
            draw.flakyOrigin
            ? try FaultOrigin(root: fixture.origin, fault: .unavailable, probability: 0.2, seed: Int(seed % 1000)) : nil
        let origin = flaky?.url ?? nginx.url
        var hostile: [HostilePeer] = []
        defer { for peer in hostile { _ = peer.stop() } }
        var urls: [String] = []
        for mode in draw.peers {
            if mode == "honest" {
                urls.append(share)
            } else {
                let peer = try HostilePeer(upstream: share, mode: mode, after: 3)
                hostile.append(peer)
                urls.append(peer.url)
            }
        }
        let baseline = try timedInstall(fixture, "plain-\(index)", origin: origin, extra: [], killed: false)
        if let broken = baseline.broken { return "the install without peers: \(broken)" }
        let withPeers = try timedInstall(
            fixture, "peers-\(index)", origin: origin, extra: urls.flatMap { ["--peer", $0] }, killed: draw.killed)
        if let broken = withPeers.broken { return "the install with peers: \(broken)" }
        let allowed = 3.0 + 3.0 * Double(urls.count)
        print(
            String(
                format: "peer sequence %d (seed %llu): %@: %.1f s with peers, %.1f s without", index, seed,
                draw.description, withPeers.seconds, baseline.seconds))
        if withPeers.seconds - baseline.seconds > allowed {
            return String(
                format: "the peers cost %.1f s over the install without them (%.1f s, at most %.0f s more allowed)",
                withPeers.seconds - baseline.seconds, baseline.seconds, allowed)
        }
        return try contents(fixture.directory + "/peers-\(index)/current") == contents(fixture.directory + "/build-1")
            ? nil : "the install with peers is not byte-exact"
    }

    /// Installs the build into a new folder `name` from `origin` (`extra`: the sync's peers), the first sync
    /// killed at its first batch when `killed`; the sync's time (the killed run's too), or what went wrong.
    private func timedInstall(_ fixture: Fixture, _ name: String, origin: String, extra: [String], killed: Bool) throws
        -> (seconds: Double, broken: String?)
    {
        let root = fixture.directory + "/" + name
        let created = try CLI.run(["init", "--install", root, "--remote", origin, "--root", fixture.rootMetadata])
        guard created.status == 0 else { return (0, "init exited \(created.status): \(created.stderr)") }
        // Ranges of at most 64 KiB: many of them, so that what a peer costs per range adds up as on a big build.
        let small = try CLI.run(["config", "set", "maxRequestBytes", "65536", "--install", root])
        guard small.status == 0 else { return (0, "config set exited \(small.status): \(small.stderr)") }
        let start = ContinuousClock.now
        if killed {
            let first = try CLI.run(
                ["sync", "--install", root, "--quiet"] + extra, environment: ["PATCHSYNC_CRASH_AT": "batchWritten"])
            // Killed (no error printed), or done before its first batch: anything else is a failure.
            if first.status != 0 && first.stderr.contains("error:") {
                return (0, "the killed sync failed instead: \(first.stderr)")
            }
        }
        let sync = try CLI.run(["sync", "--install", root, "--json"] + extra)
        let elapsed = ContinuousClock.now - start
        let seconds = elapsed.inSeconds
        guard sync.status == 0 else { return (seconds, "sync exited \(sync.status): \(sync.stdout.suffix(1500))") }
        let apply = try CLI.run(["apply", "--install", root])
        guard apply.status == 0 else { return (seconds, "apply exited \(apply.status): \(apply.stderr)") }
        return (seconds, nil)
    }
}
