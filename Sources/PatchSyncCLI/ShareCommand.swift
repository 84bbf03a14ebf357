import ArgumentParser
import Foundation
import PatchSync

/// The options of a LAN share, for `share` and `sync --share`.
struct ShareOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "An address to serve on (repeatable; default: every private-network address of this machine, port 27472).",
            valueName: "address:port"))
    var listen: [String] = []
    @Flag(name: .customLong("public"), help: "Allow a --listen address that is not on a private network.")
    var allowPublic = false
    @Option(
        name: .customLong("share-rate"),
        help: ArgumentHelp(
            "The most the share sends, all peers together, bytes per second (K, M, G).", valueName: "rate"),
        transform: ByteCount.parseRate)
    var shareRate: Int = 32 << 20
    @Option(help: "The most connections served at once (the one idle longest makes way for a newcomer).") var maxPeers:
        Int = ShareServer.Options().maxConnections

    var server: ShareServer.Options {
        var options = ShareServer.Options()
        options.listen = listen
        options.allowPublic = allowPublic
        options.maxBytesPerSecond = max(4096, shareRate)
        options.maxConnections = max(1, min(maxPeers, 256))
        return options
    }

    /// Starts a share of `install` and announces it with DNS-SD where Avahi runs.
    func start(_ install: Install) throws(PatchSyncError) -> (ShareServer, Process?) {
        let server = try ShareServer(install: install, options: server)
        server.start()
        return (server, PeerDiscovery.announce(repository: server.repository, port: server.port))
    }
}

struct Share: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve this install's chunks to players on the same network (opt-in), until stopped.",
        discussion: """
            Other installs of the same game ask a share for chunks by their SHA-256 (`sync --peer URL`, \
            or found with DNS-SD where Avahi runs) and check each against the signed manifest, so a \
            share never has to be trusted. It serves the chunks of the live, ready and kept builds, \
            nothing else: no path, no listing. It binds only the addresses given with --listen (by \
            default the machine's private-network addresses), serves at most --max-peers at once and \
            --share-rate in all, and pauses (503) while the game runs or a discretionary sync would \
            defer. Run as root, it serves as the owner of the install folder. SIGTERM or SIGINT stop it.

            Examples:
              patchsync share --install ~/Games/forest
              patchsync share --install ~/Games/forest --share-rate 50M --for 8h
            """)

    @Option(help: "The install folder.") var install: String
    @OptionGroup var share: ShareOptions
    @Option(
        name: .customLong("for"), help: ArgumentHelp("Stop after this long (30m, 8h).", valueName: "duration"))
    var duration: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() async throws {
        let output = Output(json: json)
        // Run as root, the share serves as the install folder's owner: a flaw in it never reaches beyond
        // what the player can read.
        try actAsOwner(of: self.install)
        let install = try Install.open(at: self.install)
        let (server, announcer) = try share.start(install)
        defer { announcer?.terminate() }
        if !json {
            FileHandle.standardError.write(
                Data(
                    ("sharing \(server.chunkCount) chunks of \(install.root) on "
                        + server.addresses.map { "http://\($0)" }.joined(separator: ", ")
                        + (announcer == nil
                            ? " (Avahi not installed: peers give it with --peer)" : " (announced with DNS-SD)")
                        + "\n").utf8))
        }
        let stop = SyncStop()
        let signals = SignalStop(stop)
        defer { withExtendedLifetime(signals) {} }
        let end = try duration.map { Date() + (try parseDuration($0)) }
        while stop.reason == nil, end.map({ Date() < $0 }) ?? true {
            try? await Task.sleep(for: .milliseconds(200))
        }
        server.stop()
        struct Result: Encodable {
            var addresses: [String]
            var repository: String
            var chunks: Int
            var counters: ShareServer.Counters
        }
        let c = server.counters
        output.result(
            Result(addresses: server.addresses, repository: server.repository, chunks: server.chunkCount, counters: c),
            human: "served \(c.served) chunks (\(ByteCount.format(c.bytesServed))) of \(c.requests) requests; "
                + "\(c.notHeld) not held, \(c.refused) refused, \(c.busy) turned away busy, \(c.paused) while paused")
    }
}
