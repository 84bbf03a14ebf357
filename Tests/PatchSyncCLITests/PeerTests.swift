import Foundation
import PatchSyncTestSupport
import Testing

@testable import PatchSync

@Suite("LAN peers: syncs that take chunks from other players", .tags(.cli), .serialized)
struct PeerTests {
    /// A share of a seeded install, in this process, on loopback.
    static func share(_ root: String) throws -> (ShareServer, String) {
        let install = try Install.open(at: root)
        var options = ShareServer.Options()
        options.listen = ["127.0.0.1:0"]
        options.maxBytesPerSecond = 1 << 30
        let server = try ShareServer(install: install, options: options)
        server.start()
        return (server, "http://" + server.addresses[0])
    }

    /// The stored bytes of every distinct chunk of `manifest`: what a fresh install fetches.
    static func objectBytes(_ manifest: Manifest) -> Int64 {
        var seen = Set<SHA256Digest>()
        return manifest.files.flatMap(\.chunks).filter { seen.insert($0.sha256).inserted }.reduce(0) {
            $0 + Int64($1.objectLength)
        }
    }

    @Test(
        "a player that names a seed's share with --peer installs byte-exact with at most 5% of the build's bytes from the origin; the report says what came from peers, the origin and local files"
    )
    func fromASeed() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.02)
        try fixture.publish(build, id: "1")
        let manifest = try BundleChoiceTests.manifest(fixture, "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let (server, url) = try Self.share(try player(fixture, "seed", remote: nginx.url))
        defer { server.stop() }

        let before = nginx.bytesServed(under: "/objects/")
        var synced = CLI.Result(status: -1, stdout: "", stderr: "")
        let root = try player(fixture, "player", remote: nginx.url, sync: ["--peer", url, "--json"]) { synced = $0 }
        let fromOrigin = nginx.bytesServed(under: "/objects/") - before
        #expect(
            Double(fromOrigin) <= 0.05 * Double(Self.objectBytes(manifest)),
            "\(fromOrigin) object bytes came from the origin")
        #expect(try contents(root + "/current") == contents(build))
        let report = try lastJSON(synced.stdout)
        let peers = try #require(report["bytesFromPeers"] as? Int)
        #expect(Int64(peers) == manifest.totalSize - Int64(report["bytesFromLocal"] as? Int ?? -1), "\(report)")
        #expect(report["bytesFromOrigin"] as? Int == 0)
        #expect(server.counters.served > 0 && server.counters.refused == 0)
    }

    @Test(
        "--max-rate holds a sync's peers as it holds its origin: what the share and the origin sent the player together stays at or below 256 KiB/s, and the peer still serves most of the build"
    )
    func capHoldsPeers() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.02)
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let (server, url) = try Self.share(try player(fixture, "seed", remote: nginx.url))
        defer { server.stop() }
        let root = fixture.directory + "/player"
        #expect(
            try CLI.run(["init", "--install", root, "--remote", nginx.url, "--root", fixture.rootMetadata]).status == 0)
        let before = nginx.bytesServed()
        let started = Date()
        let synced = try CLI.run(["sync", "--install", root, "--peer", url, "--max-rate", "256K", "--json"])
        let elapsed = Date().timeIntervalSince(started)
        #expect(synced.status == 0, "\(synced.stderr)")
        let fromPeer = server.counters.bytesServed
        let sent = fromPeer + (nginx.bytesServed() - before)
        #expect(fromPeer > 1 << 20, "the peer sent most of the build: \(fromPeer) of \(sent) bytes")
        // The bucket starts full (16 KiB at this rate), so allow that burst on top of the rate.
        let rate = Double(sent - 16 * 1024) / elapsed
        #expect(rate <= 256 * 1024 * 1.1, "\(Int(rate)) B/s with a 256 KiB/s cap over \(elapsed) s")
        #expect(try CLI.run(["apply", "--install", root]).status == 0)
        #expect(try contents(root + "/current") == contents(build))
    }

    @Test(
        "a seed whose files were overwritten by hand (same sizes, zeros) serves none of their chunks (each is read back against its hash): a player that names it still installs byte-exact, from the origin"
    )
    func seedDamagedByHand() throws {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let seed = try player(fixture, "seed", remote: nginx.url)
        let (server, url) = try Self.share(seed)
        defer { server.stop() }
        let damaged = try CLI.runProgram(
            "/bin/sh",
            [
                "-c",
                "chmod -R u+w '\(seed)/current/' && find '\(seed)/current/' -type f -size +0 -exec sh -c "
                    + "'head -c $(stat -c %s \"$1\") /dev/zero | dd of=\"$1\" conv=notrunc status=none' _ {} \\;"
            ])
        #expect(damaged.status == 0, "\(damaged.stdout)")
        let root = try player(fixture, "player", remote: nginx.url, sync: ["--peer", url])
        #expect(try contents(root + "/current") == contents(build))
        #expect(server.counters.served == 0 && server.counters.notHeld > 0, "\(server.counters)")
    }

    /// What a player's fresh install did with `--peer` a hostile_peer.py in `mode` in front of a seed's
    /// share (the sample build at scale 0.01, from nginx).
    struct HostileRun {
        /// The sync's `--json` report.
        var report: [String: Any]
        /// The requests the hostile peer received.
        var asked: Int
        /// What the share behind it was asked and served.
        var share: ShareServer.Counters
        /// Object bytes the origin served the player.
        var fromOrigin: Int64
        /// The sync's time (and the apply's).
        var seconds: TimeInterval
        /// The player's tree is the build, byte for byte.
        var exact: Bool

        /// Why the peer was dropped (nil: it was not).
        var dropped: String? { (report["peers"] as? [[String: Any]])?.first?["dropped"] as? String }
    }

    static func hostileRun(_ mode: String, after: Int = 5, config: [String: String] = [:]) throws -> HostileRun {
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.01)
        try fixture.publish(build, id: "1")
        let nginx = try NginxOrigin(root: fixture.origin)
        defer { nginx.stop() }
        let (server, url) = try Self.share(try player(fixture, "seed", remote: nginx.url))
        defer { server.stop() }
        let peer = try HostilePeer(upstream: url, mode: mode, after: after)
        let before = nginx.bytesServed(under: "/objects/")
        let started = Date()
        var synced = CLI.Result(status: -1, stdout: "", stderr: "")
        let root = try player(
            fixture, "player", remote: nginx.url, sync: ["--peer", peer.url, "--json"], config: config
        ) { synced = $0 }
        let seconds = Date().timeIntervalSince(started)
        return HostileRun(
            report: try lastJSON(synced.stdout), asked: peer.stop(), share: server.counters,
            fromOrigin: nginx.bytesServed(under: "/objects/") - before, seconds: seconds,
            exact: try contents(root + "/current") == contents(build))
    }

    @Test(
        "a peer that sends wrong bytes, one that vanishes mid-transfer and one that answers slowly never make an install wrong or fail: it is dropped and the origin fills in",
        arguments: ["flip", "vanish", "slow"])
    func hostilePeers(mode: String) throws {
        let run = try Self.hostileRun(mode)
        #expect(run.seconds < 60, "\(mode): a bad peer costs seconds, not the sync")
        #expect(run.exact, "\(mode): the install is exact")
        #expect(run.fromOrigin > 0, "\(mode): the origin filled in")
        #expect(run.dropped != nil, "\(mode): the peer is dropped: \(run.report["peers"] ?? "no peers")")
        if mode == "flip" { #expect(run.dropped?.contains("SHA-256") == true, "\(run.dropped ?? "")") }
    }

    @Test(
        "a peer that holds nothing (404 at once) is asked once per range, never chunk by chunk: its probe and at most one request for each range the sync planned, then the origin serves the build"
    )
    func emptyPeerAskedOncePerRange() throws {
        let run = try Self.hostileRun("empty")
        let ranges = try #require(run.report["requests"] as? Int)
        let chunks = try #require(run.report["chunksFetched"] as? Int)
        #expect(chunks > 2 * (1 + ranges), "the build has many chunks a range: \(chunks) chunks in \(ranges) ranges")
        #expect(
            run.asked >= 1 && run.asked <= 1 + ranges, "\(run.asked) requests for \(chunks) chunks in \(ranges) ranges")
        #expect(run.exact)
        #expect(run.fromOrigin > 0)
    }

    @Test(
        "a peer that answers every chunk 404 after 1.8 s (just under the 2 s a peer once had) costs a probe, not a wait per chunk: it is asked at most a probe and three times, dropped, and the origin serves the build"
    )
    func latePeerDropped() throws {
        let run = try Self.hostileRun("late404")
        #expect(run.asked >= 1 && run.asked <= 1 + PeerPolicy.strikes, "\(run.asked) requests")
        #expect(run.dropped != nil, "the late peer is dropped: \(run.report["peers"] ?? "no peers")")
        #expect(run.exact)
        #expect(run.fromOrigin > 0)
    }

    @Test(
        "regression: an honest peer with two places, which answers 503 with Retry-After: 1 to any request beyond them, still delivers the build: the sync asks it on two requests at once and owes it nothing for the ones it turned away (one player in four took nothing from a crowded seed)"
    )
    func crowdedPeerServes() throws {
        // Ranges of 64 KiB at most: many at once, more than the peer's two places.
        let run = try Self.hostileRun("crowded", after: 2, config: ["maxRequestBytes": "64K"])
        #expect((run.report["requests"] as? Int ?? 0) > 4, "\(run.report)")
        #expect(
            run.asked > (run.report["chunksFetched"] as? Int ?? 0) + 1,
            "some requests were turned away: \(run.asked) asked")
        #expect(run.dropped == nil, "\(run.dropped ?? "")")
        #expect(run.fromOrigin == 0, "the origin sent \(run.fromOrigin) object bytes: \(run.report["peers"] ?? "")")
        #expect(run.exact)
    }

    @Test(
        "a peer that answers every request 503 with Retry-After: 1 is waited for a few seconds in all, then dropped, and the origin serves the build"
    )
    func momentPeerDropped() throws {
        let run = try Self.hostileRun("moment")
        #expect(run.dropped?.contains("more than they were worth") == true, "\(run.dropped ?? "not dropped")")
        #expect(run.exact)
        #expect(run.fromOrigin > 0)
    }

    @Test(
        "a peer's redirect is never followed: a peer that answers 302 to a share holding every chunk gets no request to that share, delivers nothing, is dropped, and the origin serves the build"
    )
    func redirectNotFollowed() throws {
        let run = try Self.hostileRun("redirect")
        #expect(run.asked >= 1, "the peer was asked")
        #expect(run.share.requests == 0, "no request reached the share behind the redirect: \(run.share)")
        #expect((run.report["bytesFromPeers"] as? Int ?? 0) == 0, "\(run.report)")
        #expect(run.dropped?.contains("302") == true, "\(run.dropped ?? "not dropped")")
        #expect(run.exact)
    }
}

/// Tests/Peers/hostile_peer.py in `mode` in front of `upstream`, on loopback: a LAN peer that
/// misbehaves (`after`: the chunks it forwards before it vanishes, in mode `vanish`).
final class HostilePeer {
    private let process = Process()
    private let out = Pipe()
    /// Its base URL, for `--peer`.
    private(set) var url = ""
    private var stopped = true

    init(upstream: String, mode: String, after: Int = 5) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [S3Server.packageRoot + "/Tests/Peers/hostile_peer.py", upstream, mode, String(after)]
        process.standardOutput = out
        try process.run()
        stopped = false
        let printed = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
        guard let port = Int(printed.trimmingCharacters(in: .whitespacesAndNewlines)) else {
            _ = stop()
            throw PatchSyncError(.internal, "hostile_peer.py printed no port: \(printed)")
        }
        url = "http://127.0.0.1:\(port)"
    }

    /// Stops it (SIGKILL: a SIGTERM ignored by the test process stays ignored in its children) and
    /// returns the requests it received.
    func stop() -> Int {
        guard !stopped else { return 0 }
        stopped = true
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return printed.split(separator: "\n").filter { $0 == "asked" }.count
    }

    deinit { _ = stop() }
}

/// Players in network namespaces on one bridge, as machines on a LAN: each namespace has its own
/// interfaces and addresses, the origin is on the bridge's address in this one.
final class LAN {
    let bridge = "psbr\(getpid() % 10000)"
    let net: String
    private(set) var spaces: [String] = []

    init(net: String = "10.\(77 + getpid() % 100).0") throws {
        self.net = net
        try Self.run(
            "ip link add \(bridge) type bridge && ip addr add \(net).1/24 dev \(bridge) && ip link set \(bridge) up")
    }

    /// A namespace with address NET.(10 + number) on the bridge.
    func add(_ number: Int) throws -> String {
        let name = "\(bridge)n\(number)"
        try Self.run(
            """
            ip netns add \(name) && ip link add \(name)v type veth peer name \(name)p && ip link set \(name)p netns \(name) \
            && ip link set \(name)v master \(bridge) up && ip netns exec \(name) ip addr add \(net).\(10 + number)/24 dev \(name)p \
            && ip netns exec \(name) ip link set \(name)p up && ip netns exec \(name) ip link set lo up
            """)
        spaces.append(name)
        return name
    }

    func address(_ number: Int) -> String { "\(net).\(10 + number)" }

    deinit {
        for name in spaces { _ = try? Self.run("ip netns del \(name); ip link del \(name)v 2>/dev/null; true") }
        _ = try? Self.run("ip link del \(bridge)")
    }

    static var available: Bool { getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip") }

    @discardableResult
    static func run(_ script: String) throws -> String {
        let result = try CLI.runProgram("/bin/sh", ["-c", script])
        guard result.status == 0 else { throw PatchSyncError(.internal, "\(script): \(result.stdout)") }
        return result.stdout
    }
}

@Suite("LAN peers in network namespaces", .tags(.cli), .enabled(if: LAN.available))
struct LANPeerTests {
    @Test(
        "players B and C, each in its own network namespace on one bridge, install from player A's share (bound by default to A's private address, named with --peer) with at most 5% of the build's bytes from the origin, byte-exact"
    )
    func twoPlayersFromOneSeed() throws {
        let lan = try LAN()
        let spaces = try (0..<3).map { try lan.add($0) }
        let fixture = try Fixture()
        let build = try fixture.sampleBuild(1, scale: 0.03)
        try fixture.publish(build, id: "1")
        let manifest = try BundleChoiceTests.manifest(fixture, "1")
        let nginx = try NginxOrigin(root: fixture.origin, alsoOn: lan.net + ".1")
        defer { nginx.stop() }
        let remote = "http://\(lan.net).1:\(nginx.port)"
        let exe = CLI.executable
        func inSpace(_ space: String, _ arguments: [String]) throws -> CLI.Result {
            try CLI.runProgram("/usr/sbin/ip", ["netns", "exec", space, exe] + arguments)
        }
        let roots = (0..<3).map { fixture.directory + "/player\($0)" }
        for (space, root) in zip(spaces, roots) {
            #expect(
                try inSpace(space, ["init", "--install", root, "--remote", remote, "--root", fixture.rootMetadata])
                    .status == 0)
        }
        let seeded = try inSpace(spaces[0], ["sync", "--install", roots[0]])
        #expect(seeded.status == 0, "\(seeded.stdout)")
        #expect(try inSpace(spaces[0], ["apply", "--install", roots[0]]).status == 0)
        // A's share, with no --listen: its private address in its namespace (10.x), nothing else.
        let share = Process()
        share.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        share.arguments = ["netns", "exec", spaces[0], exe, "share", "--install", roots[0]]
        share.standardError = FileHandle.nullDevice
        try share.run()
        defer {
            // `ip netns exec` runs the share in its own process: SIGINT, which it stops on, not ignored here.
            kill(share.processIdentifier, SIGKILL)
            share.waitUntilExit()
            _ = try? CLI.runProgram("/bin/sh", ["-c", "ip netns pids \(spaces[0]) | xargs -r kill -9"])
        }
        let peer = "http://\(lan.address(0)):\(ShareServer.defaultPort)"
        try Poll.until(timeout: .seconds(60), every: .milliseconds(100)) {
            try CLI.runProgram(
                "/usr/sbin/ip", ["netns", "exec", spaces[1], "curl", "-s", "-o", "/dev/null", peer + "/"]
            ).status == 0
        }
        let total = PeerTests.objectBytes(manifest)
        for (space, root) in zip(spaces.dropFirst(), roots.dropFirst()) {
            let before = nginx.bytesServed(under: "/objects/")
            let synced = try inSpace(space, ["sync", "--install", root, "--peer", peer, "--json"])
            #expect(synced.status == 0, "\(synced.stdout.suffix(2000))")
            let fromOrigin = nginx.bytesServed(under: "/objects/") - before
            #expect(
                Double(fromOrigin) <= 0.05 * Double(total),
                "\(root): \(fromOrigin) of \(total) object bytes from the origin")
            #expect(try inSpace(space, ["apply", "--install", root]).status == 0)
            #expect(try contents(root + "/current") == contents(build), "\(root) is byte-exact")
        }
    }
}

/// A player's install of the fixture's newest build: `init` from `remote`, `sync` (with `sync`'s extra
/// arguments; its result to `synced`) and `apply`, each expected to succeed. Returns the install folder.
@discardableResult
func player(
    _ fixture: Fixture, _ name: String, remote: String, sync arguments: [String] = [], config: [String: String] = [:],
    synced: (CLI.Result) -> Void = { _ in }
) throws -> String {
    let root = fixture.directory + "/" + name
    #expect(try CLI.run(["init", "--install", root, "--remote", remote, "--root", fixture.rootMetadata]).status == 0)
    for (key, value) in config { #expect(try CLI.run(["config", "set", key, value, "--install", root]).status == 0) }
    let result = try CLI.run(["sync", "--install", root] + arguments)
    #expect(result.status == 0, "\(name): \(result.stderr)")
    synced(result)
    #expect(try CLI.run(["apply", "--install", root]).status == 0)
    return root
}

/// The content of every file under `root` (modes aside: installs make files read-only).
func contents(_ root: String) throws -> [String: String] { try treeFacts(root).mapValues(\.sha256) }
