import Foundation
import Logging
import Synchronization

/// `patchsync share`: serves the chunks an install holds (``SharedChunks``) to players on the same
/// network, by chunk hash over HTTP/1.1, and nothing else (``ShareRequest``).
///
/// A service on a player's machine is an attack surface, so everything is bounded: it binds only the
/// addresses it is given (by default those of private networks: ``privateAddresses()``), holds at most
/// ``Options/maxConnections`` connections, ``Options/maxConnectionsPerAddress`` of them from one
/// client address, and one idle connection makes way for a new one (``ShareConnections``): sockets left
/// silent never lock a peer out. A connection waits at most ``Options/idleSeconds`` for a request and
/// reads at most ``ShareRequest/maxHeadBytes`` of its head within ``Options/requestSeconds``. The share
/// sends at most ``Options/maxBytesPerSecond`` in all, every answer costing some (``ShareBudget``):
/// past a short wait, an answer is 503 with Retry-After. It answers 503 too while the game runs or a
/// discretionary sync would defer (``SyncWatch``). Responses carry no server name, no listing, no
/// path: a chunk's bytes (checked against its hash as they are read), or an empty body.
///
/// Thread-safety: one accept thread, one thread per connection, one watcher thread; what they share
/// is in `Mutex`es (``State``) or immutable.
public final class ShareServer: Sendable {
    static let logger = Logger(label: "patchsync.share")
    public struct Options: Sendable {
        /// `ADDRESS:PORT` to bind (`[v6]:PORT` for IPv6); empty: every private address, on ``defaultPort``.
        public var listen: [String] = []
        /// Allow binding a public address.
        public var allowPublic = false
        /// Connections held at once: past them, a new one takes the place of the one idle longest (503
        /// when every one is answering a request or was idle too briefly to be dropped). Ten players
        /// syncing from this share at once, each on up to 6 connections, fit without taking places.
        public var maxConnections = 64
        /// Connections held at once from one client address (a sync asks a peer on up to 6 by default).
        public var maxConnectionsPerAddress = 8
        /// All connections together.
        public var maxBytesPerSecond = 32 << 20
        /// The time a client has to send a whole request head, once it started one.
        public var requestSeconds = 10
        /// The time a connection may wait for a request (its first, or the next on a keep-alive one):
        /// longer than a peer reuses one (under 2 s), as long as one that answered takes to make way.
        public var idleSeconds = 3
        /// Pause (503) while the game runs or a discretionary sync would defer.
        public var pauseWithGame = true

        public init() {}
    }

    public static let defaultPort = 27472

    /// What a share has done, for its log, `--json` and tests.
    public struct Counters: Sendable, Codable, Equatable {
        public var requests = 0
        public var served = 0
        public var bytesServed: Int64 = 0
        public var notHeld = 0
        public var refused = 0
        public var busy = 0
        public var paused = 0
        public var timedOut = 0
        /// Idle connections closed to make way for a new one.
        public var evicted = 0
        /// Answers 503 because the share was at its rate.
        public var throttled = 0
    }

    private struct State: Sendable {
        var chunks: SharedChunks
        var counters = Counters()
        var connections: ShareConnections
        var pausedReason: String?
    }

    public let install: Install
    public let repository: String
    public let options: Options
    /// The addresses bound, as `ADDRESS:PORT`.
    public let addresses: [String]
    /// The port of the first address (every one has the same unless --listen said otherwise).
    public var port: Int { addresses.first.flatMap { $0.split(separator: ":").last.flatMap { Int($0) } } ?? 0 }
    private let sockets: [Int32]
    private let state: Mutex<State>
    private let stopping = Atomic<Bool>(false)
    private let bucket: Mutex<ShareBudget>
    private let done = DispatchGroup()

    public init(install: Install, options: Options = Options()) throws(PatchSyncError) {
        self.install = install
        self.options = options
        repository = try ShareIdentity.of(install)
        let chunks = try SharedChunks(install: install)
        let connections = ShareConnections(limit: options.maxConnections, perAddress: options.maxConnectionsPerAddress)
        state = Mutex(State(chunks: chunks, connections: connections))
        bucket = Mutex(ShareBudget(bytesPerSecond: max(4096, options.maxBytesPerSecond), at: .now))
        var wanted = options.listen
        if wanted.isEmpty {
            wanted = Self.privateAddresses().map { Self.join($0, Self.defaultPort) }
            guard !wanted.isEmpty else {
                throw PatchSyncError(
                    .usage,
                    "this machine has no address on a private network (10/8, 172.16/12, 192.168/16, fd00::/8) to share on",
                    remedy: "give --listen ADDRESS:PORT (a public address also needs --public)")
            }
        }
        var bound: [(Int32, String)] = []
        do throws(PatchSyncError) {
            for text in wanted {
                let (host, port) = try Self.split(text)
                guard options.allowPublic || Self.isPrivateOrLoopback(host) else {
                    throw PatchSyncError(
                        .usage, "\(host) is a public address: a share there answers anyone on the internet",
                        remedy: "share on a private network address, or add --public if that is what you want")
                }
                bound.append(try Self.bind(host: host, port: port))
            }
        } catch {
            for (fd, _) in bound { close(fd) }
            throw error
        }
        sockets = bound.map(\.0)
        addresses = bound.map(\.1)
    }

    deinit { for fd in sockets { close(fd) } }

    public var counters: Counters { state.withLock { $0.counters } }
    /// How many chunks the share holds now.
    public var chunkCount: Int { state.withLock { $0.chunks.count } }

    /// Serves until ``stop()``: accepts on every bound address, and looks at the conditions every
    /// 100 ms and at the install's builds every 2 s (a new live or ready build is indexed then).
    public func start() {
        for fd in sockets {
            done.enter()
            let thread = Thread { [self] in
                acceptLoop(fd)
                done.leave()
            }
            thread.name = "patchsync-share-accept"
            thread.start()
        }
        done.enter()
        let watcher = Thread { [self] in
            watch()
            done.leave()
        }
        watcher.name = "patchsync-share-watch"
        watcher.start()
    }

    /// Stops accepting and waits for the threads (connections end within ``Options/requestSeconds``).
    public func stop() {
        stopping.store(true, ordering: .relaxed)
        done.wait()
    }

    private func watch() {
        let watch = try? SyncWatch(
            install: install, config: (try? install.config()) ?? InstallConfig(remotes: [], channel: "live"),
            environment: .system, deadline: nil, discretionary: true, stop: nil)
        var tick = 0
        var indexed = state.withLock { $0.chunks.deployments }
        // The slower conditions are looked at every 10th and 300th tick: what they said holds until then.
        var everyTenth: String?, every300th: String?
        while !stopping.load(ordering: .relaxed) {
            let reason = options.pauseWithGame ? watch?.failing(tick: tick)?.message : nil
            if tick % 300 == 0 { every300th = reason } else if tick % 10 == 0 { everyTenth = reason }
            let paused = reason ?? everyTenth ?? every300th
            state.withLock { $0.pausedReason = paused }
            if tick % 20 == 0 {
                // Indexed again until every deployment named could be indexed (one mid-apply is retried).
                let now = SharedChunks.deployments(of: install)
                if now != indexed, let chunks = try? SharedChunks(install: install) {
                    indexed = chunks.deployments
                    state.withLock { $0.chunks = chunks }
                }
            }
            tick += 1
            usleep(100_000)
        }
    }

    private func acceptLoop(_ listener: Int32) {
        while !stopping.load(ordering: .relaxed) {
            var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 200) > 0 else { continue }
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { continue }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            guard let id = admit(fd) else {
                bucket.withLock { $0.charge(0, at: .now) }
                // Places free as connections settle (``ShareConnections/settle``): a peer asks again in a second.
                Self.send(fd, Self.head(503, length: 0, close: true, retryAfter: 1))
                Self.closeGently(fd)
                continue
            }
            Self.setTimeouts(fd, seconds: options.requestSeconds)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let thread = Thread { [self] in
                serve(fd, id: id)
                // Forgotten before it is closed: an fd shut down by admit(_:) is never another's by then.
                state.withLock { $0.connections.closed(id) }
                close(fd)
            }
            thread.name = "patchsync-share-conn"
            thread.start()
        }
    }

    /// Takes connection `fd` from the client at its peer address, an idle connection making way for it
    /// if need be (shut down here, under the lock: its thread closes it only once it is forgotten).
    /// Returns its id; nil when it is turned away.
    private func admit(_ fd: Int32) -> Int? {
        let address = Self.peerAddress(fd)
        return state.withLock { state -> Int? in
            let now = ContinuousClock.now
            // What the address held, described only when debug logging asks for it (under the lock).
            let described = { [open = state.connections.open] in
                open.values.filter { $0.address == address }
                    .map { c in
                        c.idleSince.map { "idle \(PeerPolicy.text(now - $0))\(c.answered ? " answered" : "")" }
                            ?? "busy"
                    }
                    .joined(separator: ", ")
            }
            switch state.connections.admit(fd: fd, address: address, at: now, hasInput: Self.hasInput) {
            case .refused:
                state.counters.busy += 1
                Self.logger.debug("turned away \(address): \(described())")
                return nil
            case .admitted(let id, let closing):
                if let closing {
                    Self.logger.debug("\(address) made way: \(described())")
                    state.counters.evicted += 1
                    _ = Glibc.shutdown(closing, Int32(SHUT_RDWR))
                }
                return id
            }
        }
    }

    /// Connection `id`: requests one after another (keep-alive) until the client closes, a request is
    /// refused, none comes within ``Options/idleSeconds``, a head takes longer than
    /// ``Options/requestSeconds``, or the connection makes way for a new one.
    private func serve(_ fd: Int32, id: Int) {
        var buffer: [UInt8] = []
        for _ in 0..<10_000 {
            guard !stopping.load(ordering: .relaxed) else { return }
            guard let head = readHead(fd, &buffer), state.withLock({ $0.connections.busy(id) }) else { return }
            state.withLock { $0.counters.requests += 1 }
            switch head {
            case .failure(let refusal):
                state.withLock { state in
                    if refusal.status == 408 { state.counters.timedOut += 1 } else { state.counters.refused += 1 }
                }
                bucket.withLock { $0.charge(0, at: .now) }
                Self.send(fd, Self.head(refusal.status, length: 0, close: true))
                return
            case .success(var request):
                // A client over its share of the places while another waits: this answer is its last here.
                if state.withLock({ $0.connections.yields(id, at: .now) }) { request.close = true }
                guard respond(fd, to: request) else { return }
                if request.close { return }
            }
            state.withLock { $0.connections.idle(id, at: .now) }
        }
    }

    /// Answers one parsed request; false when the connection should close.
    private func respond(_ fd: Int32, to request: ShareRequest) -> Bool {
        let (paused, chunks) = state.withLock { ($0.pausedReason, $0.chunks) }
        if paused != nil {
            bucket.withLock { $0.charge(0, at: .now) }
            state.withLock { $0.counters.paused += 1 }
            return Self.send(fd, Self.head(503, length: 0, close: request.close, retryAfter: 30))
        }
        let length = request.repository == repository ? chunks.length(of: request.chunk) : nil
        // Every answer costs the share's budget, a 404 too, and reading and hashing a chunk its bytes,
        // HEAD included: a flood of requests is held to the rate like a flood of bytes.
        guard paid(length ?? 0, fd: fd) else { return false }
        let notHeld = { () -> Bool in
            self.state.withLock { $0.counters.notHeld += 1 }
            return Self.send(fd, Self.head(404, length: 0, close: request.close))
        }
        guard length != nil, let bytes = chunks.read(request.chunk) else { return notHeld() }
        if request.headOnly { return Self.send(fd, Self.head(200, length: bytes.count, close: request.close)) }
        // The head and the body in one buffer: no small write waits for an ACK (Nagle).
        let response = Array(Self.head(200, length: bytes.count, close: request.close).utf8) + bytes
        let started = ContinuousClock.now
        var offset = 0
        while offset < response.count {
            let piece = min(256 << 10, response.count - offset)
            // A reader that takes a byte at a time never holds a connection past the time a response has.
            guard !stopping.load(ordering: .relaxed),
                ContinuousClock.now - started < .seconds(options.requestSeconds * 6),
                response.withUnsafeBytes({
                    Self.sendAll(fd, UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + piece)]))
                })
            else { return false }
            offset += piece
        }
        state.withLock {
            $0.counters.served += 1
            $0.counters.bytesServed += Int64(bytes.count)
        }
        return true
    }

    /// Takes an answer with a body of `bytes` from the share's budget, after a wait of at most
    /// ``ShareBudget/maxWait``. When the share is over its rate, answers 503 with Retry-After instead
    /// and returns false: the connection closes, its place free for the retry.
    private func paid(_ bytes: Int, fd: Int32) -> Bool {
        switch bucket.withLock({ $0.take(bytes, at: .now) }) {
        case .send(let wait):
            if wait > .zero { usleep(UInt32(wait / .microseconds(1))) }
            return true
        case .refuse(let retryAfter):
            state.withLock { $0.counters.throttled += 1 }
            Self.send(fd, Self.head(503, length: 0, close: true, retryAfter: retryAfter))
            return false
        }
    }

    /// Reads one request head within the time allowed; nil when the client closed between requests, or
    /// sent nothing for ``Options/idleSeconds`` (an idle connection holds a place a peer may want).
    private func readHead(_ fd: Int32, _ buffer: inout [UInt8]) -> Result<ShareRequest, ShareRequest.Refusal>? {
        if buffer.isEmpty, !Self.readable(fd, within: options.idleSeconds) { return nil }
        let started = ContinuousClock.now
        let limit = Duration.seconds(options.requestSeconds)
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            if let end = Self.headEnd(buffer) {
                let head = Array(buffer[..<end])
                buffer.removeFirst(end + 4)
                return ShareRequest.parse(head)
            }
            // A line ended by a bare LF never ends the head the way CRLF does: refused now, not at the timeout.
            if let lf = buffer.firstIndex(of: 0x0a), lf == 0 || buffer[lf - 1] != 0x0d {
                return ShareRequest.parse(buffer)
            }
            if buffer.count > ShareRequest.maxHeadBytes {
                return .failure(ShareRequest.Refusal(status: 431, reason: "request head too large"))
            }
            if ContinuousClock.now - started > limit {
                return buffer.isEmpty
                    ? nil : .failure(ShareRequest.Refusal(status: 408, reason: "request head too slow"))
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return nil }
            if n < 0 {
                if errno == EINTR { continue }
                // SO_RCVTIMEO passed: a slow or silent client.
                return buffer.isEmpty
                    ? nil : .failure(ShareRequest.Refusal(status: 408, reason: "request head too slow"))
            }
            buffer += chunk[..<n]
        }
    }

    static func headEnd(_ buffer: [UInt8]) -> Int? {
        guard buffer.count >= 4 else { return nil }
        for i in 0...(buffer.count - 4)
        where buffer[i] == 0x0d && buffer[i + 1] == 0x0a && buffer[i + 2] == 0x0d && buffer[i + 3] == 0x0a {
            return i
        }
        return nil
    }

    static func head(_ status: Int, length: Int, close: Bool, retryAfter: Int? = nil) -> String {
        let reasons = [
            200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
            431: "Request Header Fields Too Large", 503: "Service Unavailable", 505: "HTTP Version Not Supported"
        ]
        var text = "HTTP/1.1 \(status) \(reasons[status] ?? "Error")\r\nContent-Length: \(length)\r\n"
        if status == 200 { text += "Content-Type: application/octet-stream\r\nCache-Control: no-store\r\n" }
        if let retryAfter { text += "Retry-After: \(retryAfter)\r\n" }
        text += close ? "Connection: close\r\n\r\n" : "\r\n"
        return text
    }

    @discardableResult
    static func send(_ fd: Int32, _ text: String) -> Bool {
        var bytes = Array(text.utf8)
        return bytes.withUnsafeMutableBytes { sendAll(fd, UnsafeRawBufferPointer($0)) }
    }

    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        var sent = 0
        while sent < bytes.count {
            let n = Glibc.send(fd, base + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            sent += n
        }
        return true
    }

    /// Whether `fd` has bytes to read, or was closed, within `seconds` (poll(2)).
    static func readable(_ fd: Int32, within seconds: Int) -> Bool {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while true {
            let ready = poll(&poller, 1, Int32(max(1, seconds) * 1000))
            if ready < 0 && errno == EINTR { continue }
            return ready > 0
        }
    }

    /// The numeric address of the client at the other end of `fd` ("" when it cannot be told).
    static func peerAddress(_ fd: Int32) -> String {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let named = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                getpeername(fd, address, &length) == 0
                    && getnameinfo(address, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0
            }
        }
        return named ? String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
    }

    /// Closes `fd` after an answer sent before its request was read: the request that came is read
    /// first, so the kernel does not answer it with a reset that could discard the answer unread.
    static func closeGently(_ fd: Int32) {
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
        var buffer = [UInt8](repeating: 0, count: 8192)
        for _ in 0..<4 where recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT)) > 0 {}
        close(fd)
    }

    /// Whether bytes wait unread on socket `fd` (a request its connection's thread has not read yet).
    static func hasInput(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) > 0
    }

    static func setTimeouts(_ fd: Int32, seconds: Int) {
        var timeout = timeval(tv_sec: max(1, seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }
}
