import Foundation
import PatchSyncTestSupport
import Synchronization
import Testing

@_spi(Fuzzing) @testable import PatchSync

/// Raw HTTP over a socket, as any client on the network may send it.
enum RawHTTP {
    /// Connects to `host:port`, from the local address `source` if given (any of 127.0.0.0/8 is
    /// loopback: a client each); -1 when refused.
    static func connect(_ host: String, _ port: Int, from source: String? = nil) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            inet_pton(AF_INET, source, &local.sin_addr)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            if !bound {
                close(fd)
                return -1
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        inet_pton(AF_INET, host, &address.sin_addr)
        let ok = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        if !ok {
            close(fd)
            return -1
        }
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    static func send(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        _ = bytes.withUnsafeMutableBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Everything the server sends until it closes (or 20 s pass).
    static func readAll(_ fd: Int32) -> [UInt8] {
        var out: [UInt8] = [], buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { return out }
            out += buffer[..<n]
        }
    }

    /// One request on a new connection (from `source`, if given), closed after the answer: the status
    /// line and the body.
    static func ask(_ host: String, _ port: Int, _ request: String, from source: String? = nil) -> (
        status: Int, body: [UInt8], head: String
    ) {
        let fd = connect(host, port, from: source)
        guard fd >= 0 else { return (-1, [], "") }
        defer { close(fd) }
        send(fd, request)
        let all = readAll(fd)
        guard let end = ShareServer.headEnd(all) else { return (0, all, "") }
        let head = String(decoding: all[..<end], as: UTF8.self)
        let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
        return (status, Array(all[(end + 4)...]), head)
    }
}

@Suite("LAN shares: the service", .tags(.cli))
struct ShareServiceTests {
    /// An install of the sample build, synced from the fixture's origin folder.
    static func installed(_ fixture: Fixture, _ name: String = "seed") throws -> (Install, Manifest) {
        let root = try player(fixture, name, remote: fixture.fileRemote)
        return (try Install.open(at: root), try BundleChoiceTests.manifest(fixture, "1"))
    }

    @Test(
        "a share answers a chunk it holds, checked, and 404 with an empty body for a chunk it lacks, another repository, any path (/etc/passwd, dot segments, the install's files); 405, 431 and 505 for what it never takes; the request parser's corpus runs"
    )
    func onlyChunksByHash() throws {
        let fixture = try Fixture.published(scale: 0.005)
        let (install, manifest) = try Self.installed(fixture)
        var options = ShareServer.Options()
        options.listen = ["127.0.0.1:0"]
        let server = try ShareServer(install: install, options: options)
        server.start()
        defer { server.stop() }
        let port = server.port
        let chunk = try #require(manifest.files.first { !$0.chunks.isEmpty }?.chunks.first)
        let repo = server.repository
        let good = RawHTTP.ask(
            "127.0.0.1", port,
            "GET \(ShareRequest.path(repository: repo, chunk: chunk.sha256)) HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        )
        #expect(good.status == 200 && good.body.count == chunk.length)
        #expect(good.body.withUnsafeBytes { SHA256Hasher.hash($0) } == chunk.sha256)
        #expect(!good.head.lowercased().contains("server:"), "no server name: \(good.head)")

        let other = String(repeating: "b", count: 64)
        let missing = String(repeating: "0", count: 64)
        let notFound = [
            "/patchsync/v1/\(repo)/chunks/\(missing)", "/patchsync/v1/\(other)/chunks/\(chunk.sha256.hex)",
            "/etc/passwd",
            "/patchsync/v1/\(repo)/chunks/../../../etc/passwd", "/current/" + (manifest.files.first?.path ?? ""),
            "/patchsync/v1/\(repo)/", "/", "/patchsync/v1/\(repo)/chunks/\(chunk.sha256.hex.uppercased())",
            "/patchsync/v1/\(repo)/chunks/\(chunk.sha256.hex)?x=1"
        ]
        for path in notFound {
            let answer = RawHTTP.ask("127.0.0.1", port, "GET \(path) HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
            #expect(answer.status == 404 && answer.body.isEmpty, "\(path): \(answer.status) \(answer.body.count) bytes")
        }
        let post = RawHTTP.ask(
            "127.0.0.1", port,
            "POST /patchsync/v1/\(repo)/chunks/\(chunk.sha256.hex) HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        #expect(post.status == 405)
        let huge = RawHTTP.ask(
            "127.0.0.1", port, "GET / HTTP/1.1\r\nX: \(String(repeating: "a", count: 20_000))\r\n\r\n")
        #expect(huge.status == 431, "an oversized head: \(huge.status)")
        #expect(RawHTTP.ask("127.0.0.1", port, "GET / HTTP/2.0\r\n\r\n").status == 505)
        #expect(RawHTTP.ask("127.0.0.1", port, "GET / HTTP/1.1\nHost: x\n\n").status == 400, "a bare LF")
        #expect(server.counters.served == 1)
    }

    @Test(
        "a slow request is cut off within the time allowed; a flood of silent connections is closed, each new one taking the place of the one idle longest, never answered; a flood of requests is held to the share's rate (503 with Retry-After past it); the share pauses (503) while the game runs"
    )
    func bounded() async throws {
        let fixture = try Fixture.published(scale: 0.02)
        let (install, manifest) = try Self.installed(fixture)
        var options = ShareServer.Options()
        options.listen = ["127.0.0.1:0"]
        options.requestSeconds = 1
        options.idleSeconds = 1
        options.maxConnections = 4
        options.maxBytesPerSecond = 1 << 20
        let server = try ShareServer(install: install, options: options)
        server.start()
        defer { server.stop() }
        let port = server.port

        // A client that sends half a request and waits: answered 408 and closed within about a second.
        let slow = RawHTTP.connect("127.0.0.1", port)
        RawHTTP.send(slow, "GET /patchsync/v1/")
        let started = Date()
        let answer = RawHTTP.readAll(slow)
        close(slow)
        #expect(Date().timeIntervalSince(started) < 4, "the slow request ends within its time")
        #expect(String(decoding: answer, as: UTF8.self).hasPrefix("HTTP/1.1 408"))

        // A flood of connections: 12 opened a tenth of a second apart (the time a new one has to send its
        // request) and left silent. The share holds 4: each new one takes the place of the one idle
        // longest, the last ones are closed after the idle time, and none is answered.
        let held = (0..<12).map { _ in
            usleep(110_000)  // the 0.1 s a silent connection is left to send its request, and a little
            return RawHTTP.connect("127.0.0.1", port)
        }
        let answered = held.filter { !RawHTTP.readAll($0).isEmpty }
        for fd in held { close(fd) }
        #expect(answered.isEmpty, "silent connections are closed, not answered: \(answered.count) of 12 were")
        #expect(server.counters.evicted >= 4 && server.counters.busy == 0, "\(server.counters)")

        // A flood of requests: 8 threads asking for every chunk, for 3 s, against a cap of 1 MiB/s.
        let chunks = Array(Set(manifest.files.flatMap { $0.chunks.map(\.sha256) }))
        let repo = server.repository
        try await Task.sleep(for: .milliseconds(1500))  // the silent connections have timed out
        let before = server.counters.bytesServed
        let flood = Date()
        let group = DispatchGroup()
        for client in 0..<8 {
            group.enter()
            Thread {
                var index = client
                while Date().timeIntervalSince(flood) < 3 {
                    let chunk = chunks[index % chunks.count]
                    index += 8
                    _ = RawHTTP.ask(
                        "127.0.0.1", port,
                        "GET \(ShareRequest.path(repository: repo, chunk: chunk)) HTTP/1.1\r\nConnection: close\r\n\r\n"
                    )
                }
                group.leave()
            }.start()
        }
        group.wait()
        let elapsed = Date().timeIntervalSince(flood)
        let sent = server.counters.bytesServed - before
        // the rate, its burst, the pieces in flight
        let allowed = Double(1 << 20) * elapsed + Double(1 << 20) / 10 + Double(4 << 20)
        #expect(sent > 0 && Double(sent) <= allowed, "\(sent) bytes in \(elapsed) s at a cap of 1 MiB/s")
        #expect(server.counters.throttled > 0, "requests past the rate are answered 503: \(server.counters)")

        // The game starts: the share pauses.
        let running = try install.holdRunningLock()
        let chunk = chunks[0]
        var paused: (status: Int, body: [UInt8], head: String) = (0, [], "")
        await Poll.untilAsync(timeout: .seconds(5), every: .milliseconds(100)) {
            paused = RawHTTP.ask(
                "127.0.0.1", port,
                "GET \(ShareRequest.path(repository: repo, chunk: chunk)) HTTP/1.1\r\nConnection: close\r\n\r\n")
            return paused.status == 503
        }
        #expect(paused.status == 503 && paused.head.contains("Retry-After"), "\(paused.head)")
        withExtendedLifetime(running) {}
    }

    @Test(
        "sockets opened to a share and left silent, 12 from one address and then one from each of as many addresses as the share has places, never keep a peer from being served: the one idle longest makes way, none is answered 503, and each is closed"
    )
    func silentSocketsNeverLockOut() throws {
        let fixture = try Fixture.published(scale: 0.005)
        let (install, manifest) = try Self.installed(fixture)
        var options = ShareServer.Options()
        options.listen = ["127.0.0.1:0"]
        options.maxConnections = 16
        options.idleSeconds = 6  // longer than the test takes to open them all
        let server = try ShareServer(install: install, options: options)
        server.start()
        defer { server.stop() }
        let port = server.port
        let sources =
            Array(repeating: "127.0.0.2", count: 12) + (0..<options.maxConnections).map { "127.0.0.\(10 + $0)" }
        // A tenth of a second apart: the time a new connection has to send its request before it may make way.
        let silent = sources.map { source in
            usleep(110_000)  // the 0.1 s a silent connection is left to send its request, and a little
            return RawHTTP.connect("127.0.0.1", port, from: source)
        }
        #expect(silent.allSatisfy { $0 >= 0 }, "every silent socket connected")
        let chunk = try #require(manifest.files.first { !$0.chunks.isEmpty }?.chunks.first)
        let path = ShareRequest.path(repository: server.repository, chunk: chunk.sha256)
        let answer = RawHTTP.ask("127.0.0.1", port, "GET \(path) HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        #expect(answer.status == 200 && answer.body.count == chunk.length, "\(answer.status): \(answer.head)")
        let answered = silent.filter { $0 >= 0 && !RawHTTP.readAll($0).isEmpty }
        for fd in silent where fd >= 0 { close(fd) }
        #expect(answered.isEmpty, "silent sockets are closed, never answered: \(answered.count) were")
        #expect(server.counters.busy == 0 && server.counters.evicted >= 12, "\(server.counters)")
    }

    @Test(
        "a share over its rate answers 503 with Retry-After at once instead of holding the request: 32 requests at once for its biggest chunks against 256 KiB/s get a few chunks and many 503s, each answered within seconds, and the bytes served stay within the rate, its bucket and a second's debt"
    )
    func overTheRateRefuses() throws {
        let fixture = try Fixture.published(scale: 0.02)
        let (install, manifest) = try Self.installed(fixture)
        var options = ShareServer.Options()
        options.listen = ["127.0.0.1:0"]
        options.maxConnections = 64
        options.maxBytesPerSecond = 256 << 10
        let server = try ShareServer(install: install, options: options)
        server.start()
        defer { server.stop() }
        let (port, repo) = (server.port, server.repository)
        var seen = Set<SHA256Digest>()
        let biggest = manifest.files.flatMap(\.chunks).filter { seen.insert($0.sha256).inserted }.sorted {
            $0.length > $1.length
        }.prefix(32)
        #expect(biggest.count == 32)
        let answers = Collected<(status: Int, head: String, seconds: Double)>()
        let group = DispatchGroup()
        let started = Date()
        for (index, chunk) in biggest.enumerated() {
            group.enter()
            Thread {
                let asked = Date()
                let path = ShareRequest.path(repository: repo, chunk: chunk.sha256)
                // Each from its own address: no client's connections make way for another's.
                let answer = RawHTTP.ask(
                    "127.0.0.1", port, "GET \(path) HTTP/1.1\r\nConnection: close\r\n\r\n",
                    from: "127.0.0.\(10 + index)")
                answers.add((answer.status, answer.head, Date().timeIntervalSince(asked)))
                group.leave()
            }.start()
        }
        group.wait()
        let elapsed = Date().timeIntervalSince(started)
        let all = answers.all
        let refused = all.filter { $0.status == 503 }
        #expect(all.allSatisfy { $0.status == 200 || $0.status == 503 }, "\(all.map { $0.status })")
        #expect(
            refused.count >= 16 && refused.allSatisfy { $0.head.contains("Retry-After: ") },
            "\(refused.count) of 32 answered 503")
        #expect(
            all.allSatisfy { $0.seconds < 3 },
            "no request is held: the slowest took \(all.map { $0.seconds }.max() ?? 0) s")
        let served = server.counters.bytesServed
        let most = Double(256 << 10) * (elapsed + 1.1) + Double(biggest.first?.length ?? 0)
        #expect(served > 0 && Double(served) <= most, "\(served) bytes in \(elapsed) s at 256 KiB/s")
    }

    @Test(
        "a share never binds a public address without --public: 0.0.0.0, 8.8.8.8, :: and 2001:db8::1 are refused by name, with --public as the remedy, by the library and by `patchsync share`, and the flag is what lets one bind"
    )
    func publicAddressNeedsTheFlag() throws {
        let fixture = try Fixture.published(scale: 0.005)
        let (install, _) = try Self.installed(fixture)
        func options(_ address: String, allowPublic: Bool = false) -> ShareServer.Options {
            var options = ShareServer.Options()
            options.listen = [address]
            options.allowPublic = allowPublic
            return options
        }
        for address in ["0.0.0.0:0", "8.8.8.8:0", "[::]:0", "[2001:db8::1]:0"] {
            let error = #expect(throws: PatchSyncError.self, "\(address)") {
                try ShareServer(install: install, options: options(address))
            }
            #expect(
                error?.code == .usage && error?.message.contains("is a public address") == true,
                "\(address): \(error?.message ?? "")")
            #expect(error?.remedy?.contains("--public") == true, "\(address): \(error?.remedy ?? "")")
        }
        let flagged = try ShareServer(install: install, options: options("0.0.0.0:0", allowPublic: true))
        #expect(flagged.port > 0, "with the flag, the wildcard binds (the share is never started)")
        // `--for`: were the address taken, the share would stop by itself rather than hang the test.
        let refused = try CLI.run(["share", "--install", install.root, "--listen", "0.0.0.0:0", "--for", "2s"])
        #expect(refused.status == 64 && refused.stderr.contains("--public"), "\(refused.status): \(refused.stderr)")
    }

    @Test(
        "only 10/8, 172.16/12, 192.168/16 and fc00::/7 count as private (what a share binds by default); their neighbours, the wildcards and public addresses do not",
        arguments: [
            ("10.0.0.1", true), ("10.255.255.254", true), ("172.16.0.1", true), ("172.31.255.254", true),
            ("192.168.1.20", true),
            ("fd00::11", true), ("fc00::1", true), ("9.255.255.255", false), ("11.0.0.1", false),
            ("172.15.255.254", false),
            ("172.32.0.1", false), ("192.167.1.1", false), ("192.169.0.1", false), ("8.8.8.8", false),
            ("100.64.0.1", false),
            ("0.0.0.0", false), ("::", false), ("2001:db8::1", false), ("fe80::1", false)
        ])
    func privateAddresses(address: String, isPrivate: Bool) {
        #expect(ShareServer.isPrivate(address) == isPrivate, "\(address)")
    }

    @Test(
        "the request parser refuses what a share never takes, takes its own form back, and avahi-browse output names only this repository's shares"
    )
    func parser() throws {
        let repo = String(repeating: "a", count: 64), chunk = String(repeating: "1", count: 64)
        let ok = ShareRequest.parse(
            Array("GET /patchsync/v1/\(repo)/chunks/\(chunk) HTTP/1.1\r\nHost: x\r\nConnection: close".utf8))
        #expect((try? ok.get())?.close == true)
        for bad in [
            "GET /patchsync/v1/\(repo)/chunks/\(chunk) HTTP/1.1\r\nTransfer-Encoding: chunked",
            "GET /patchsync/v1/\(repo)/chunks/\(chunk) HTTP/1.1\r\nHost: a\r\nHost: b",
            "GET /patchsync/v1/\(repo)/chunks/\(chunk) HTTP/1.1\r\nContent-Length: 4",
            "GET /patchsync/v1/\(repo)/chunks/\(chunk) HTTP/1.1\r\n Folded: x",
            "GET /patchsync/v1/\(repo)/chunks/\(chunk)\0 HTTP/1.1",
            "GET  /patchsync/v1/\(repo)/chunks/\(chunk) HTTP/1.1"
        ] {
            #expect(throws: ShareRequest.Refusal.self, "\(bad.debugDescription)") {
                try ShareRequest.parse(Array(bad.utf8)).get()
            }
        }
        // Seeded random bytes and mutations of a good request: never a trap, and the fuzz invariants hold.
        var generator = SeededRandom(seed: 34)
        let base = Array("GET /patchsync/v1/\(repo)/chunks/\(chunk) HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        for _ in 0..<3000 {
            var bytes = base
            for _ in 0..<Int.random(in: 1...6, using: &generator) {
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes[at] = UInt8.random(in: 0...255, using: &generator)
                case 1: bytes.remove(at: at)
                default: bytes.insert(UInt8.random(in: 0...255, using: &generator), at: at)
                }
            }
            FuzzTargets.shareRequest(Data(bytes))
        }
        let browse = """
            +;eth0;IPv4;PatchSync on a;_patchsync._tcp;local
            =;eth0;IPv4;PatchSync on a;_patchsync._tcp;local;a.local;10.0.0.11;27472;"repo=\(repo)"
            =;eth0;IPv4;PatchSync on b;_patchsync._tcp;local;b.local;10.0.0.12;27472;"repo=\(String(repeating: "c", count: 64))"
            =;eth0;IPv6;PatchSync on a;_patchsync._tcp;local;a.local;fe80::1;27472;"repo=\(repo)"
            =;eth0;IPv6;PatchSync on a;_patchsync._tcp;local;a.local;fd00::11;27472;"repo=\(repo)"
            """
        #expect(
            PeerDiscovery.peers(inBrowseOutput: browse, repository: repo) == [
                "http://10.0.0.11:27472", "http://[fd00::11]:27472"
            ])
    }
}

/// What concurrent threads of a test hand back.
///
/// Thread-safety: a `Mutex` holds the items.
final class Collected<Item: Sendable>: Sendable {
    private let items = Mutex<[Item]>([])

    func add(_ item: Item) { items.withLock { $0.append(item) } }
    var all: [Item] { items.withLock { $0 } }
}
