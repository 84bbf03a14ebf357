import Foundation
import Synchronization

/// `patchsync share`: serves the chunks an install holds (``SharedChunks``) to players on the same
/// network, by chunk hash over HTTP/1.1, and nothing else (``ShareRequest``).
///
/// A service on a player's machine is an attack surface, so everything is bounded: it binds only the
/// addresses it is given (by default those of private networks: ``privateAddresses()``), holds at most
/// ``Options/maxConnections`` connections (one more is answered 503 and closed), reads at most
/// ``ShareRequest/maxHeadBytes`` of a request head within ``Options/requestSeconds``, sends at most
/// ``Options/maxBytesPerSecond`` in all (one token bucket for every connection), and answers 503 while
/// the game runs or a discretionary sync would defer (``SyncWatch``). Responses carry no server name,
/// no listing, no path: a chunk's bytes (checked against its hash as they are read), or an empty body.
///
/// Thread-safety: one accept thread, one thread per connection, one watcher thread; what they share
/// is in `Mutex`es (``State``) or immutable.
public final class ShareServer: Sendable {
    public struct Options: Sendable {
        /// `ADDRESS:PORT` to bind (`[v6]:PORT` for IPv6); empty: every private address, on ``defaultPort``.
        public var listen: [String] = []
        /// Allow binding a public address.
        public var allowPublic = false
        public var maxConnections = 16
        /// All connections together.
        public var maxBytesPerSecond = 32 << 20
        /// The time a client has to send a whole request head, and the idle time between requests.
        public var requestSeconds = 10
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
    }

    private struct State: Sendable {
        var chunks: SharedChunks
        var counters = Counters()
        var connections = 0
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
    private let bucket: TokenBucket
    private let done = DispatchGroup()

    public init(install: Install, options: Options = Options()) throws(PatchSyncError) {
        self.install = install
        self.options = options
        repository = try ShareIdentity.of(install)
        let chunks = try SharedChunks(install: install)
        state = Mutex(State(chunks: chunks))
        bucket = TokenBucket(bytesPerSecond: max(4096, options.maxBytesPerSecond))
        var wanted = options.listen
        if wanted.isEmpty {
            wanted = Self.privateAddresses().map { Self.join($0, Self.defaultPort) }
            guard !wanted.isEmpty else {
                throw PatchSyncError(
                    .usage, "this machine has no address on a private network (10/8, 172.16/12, 192.168/16, fd00::/8) to share on",
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
            let admitted = state.withLock { state -> Bool in
                guard state.connections < options.maxConnections else {
                    state.counters.busy += 1
                    return false
                }
                state.connections += 1
                return true
            }
            guard admitted else {
                Self.send(fd, Self.head(503, length: 0, close: true, retryAfter: 5))
                close(fd)
                continue
            }
            Self.setTimeouts(fd, seconds: options.requestSeconds)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let thread = Thread { [self] in
                serve(fd)
                close(fd)
                state.withLock { $0.connections -= 1 }
            }
            thread.name = "patchsync-share-conn"
            thread.start()
        }
    }

    /// One connection: requests one after another (keep-alive) until the client closes, a request is
    /// refused, or one takes longer than ``Options/requestSeconds`` to arrive.
    private func serve(_ fd: Int32) {
        var buffer: [UInt8] = []
        for _ in 0..<10_000 {
            guard !stopping.load(ordering: .relaxed) else { return }
            guard let head = readHead(fd, &buffer) else { return }
            state.withLock { $0.counters.requests += 1 }
            switch head {
            case .failure(let refusal):
                state.withLock { state in
                    if refusal.status == 408 { state.counters.timedOut += 1 } else { state.counters.refused += 1 }
                }
                Self.send(fd, Self.head(refusal.status, length: 0, close: true))
                return
            case .success(let request):
                guard respond(fd, to: request) else { return }
                if request.close { return }
            }
        }
    }

    /// Answers one parsed request; false when the connection should close.
    private func respond(_ fd: Int32, to request: ShareRequest) -> Bool {
        let (paused, chunks) = state.withLock { ($0.pausedReason, $0.chunks) }
        if paused != nil {
            state.withLock { $0.counters.paused += 1 }
            return Self.send(fd, Self.head(503, length: 0, close: false, retryAfter: 30))
        }
        let notHeld = { () -> Bool in
            self.state.withLock { $0.counters.notHeld += 1 }
            return Self.send(fd, Self.head(404, length: 0, close: false))
        }
        guard request.repository == repository, let length = chunks.length(of: request.chunk) else { return notHeld() }
        // Reading and hashing a chunk costs the share's budget too, HEAD included: a flood of requests
        // is held to the rate like a flood of bytes.
        bucket.take(length)
        guard let bytes = chunks.read(request.chunk) else { return notHeld() }
        if request.headOnly { return Self.send(fd, Self.head(200, length: bytes.count, close: request.close)) }
        // The head and the body in one buffer: no small write waits for an ACK (Nagle).
        let response = Array(Self.head(200, length: bytes.count, close: request.close).utf8) + bytes
        let started = ContinuousClock.now
        var offset = 0
        while offset < response.count {
            let piece = min(256 << 10, response.count - offset)
            // A reader that takes a byte at a time never holds a connection past the time a response has.
            guard !stopping.load(ordering: .relaxed), ContinuousClock.now - started < .seconds(options.requestSeconds * 6),
                response.withUnsafeBytes({ Self.sendAll(fd, UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + piece)])) })
            else { return false }
            offset += piece
        }
        state.withLock {
            $0.counters.served += 1
            $0.counters.bytesServed += Int64(bytes.count)
        }
        return true
    }

    /// Reads one request head within the time allowed; nil when the client closed between requests.
    private func readHead(_ fd: Int32, _ buffer: inout [UInt8]) -> Result<ShareRequest, ShareRequest.Refusal>? {
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
            if let lf = buffer.firstIndex(of: 0x0a), lf == 0 || buffer[lf - 1] != 0x0d { return ShareRequest.parse(buffer) }
            if buffer.count > ShareRequest.maxHeadBytes {
                return .failure(ShareRequest.Refusal(status: 431, reason: "request head too large"))
            }
            if ContinuousClock.now - started > limit {
                return buffer.isEmpty ? nil : .failure(ShareRequest.Refusal(status: 408, reason: "request head too slow"))
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return nil }
            if n < 0 {
                if errno == EINTR { continue }
                // SO_RCVTIMEO passed: a slow or silent client.
                return buffer.isEmpty ? nil : .failure(ShareRequest.Refusal(status: 408, reason: "request head too slow"))
            }
            buffer += chunk[..<n]
        }
    }

    static func headEnd(_ buffer: [UInt8]) -> Int? {
        guard buffer.count >= 4 else { return nil }
        for i in 0...(buffer.count - 4) where buffer[i] == 0x0d && buffer[i + 1] == 0x0a && buffer[i + 2] == 0x0d && buffer[i + 3] == 0x0a {
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
        var sent = 0
        while sent < bytes.count {
            let n = Glibc.send(fd, bytes.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL))
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            sent += n
        }
        return true
    }

    static func setTimeouts(_ fd: Int32, seconds: Int) {
        var timeout = timeval(tv_sec: max(1, seconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }
}

// MARK: addresses

extension ShareServer {
    /// `host:port`, with brackets around an IPv6 address.
    static func join(_ host: String, _ port: Int) -> String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// `ADDRESS:PORT` or `[V6]:PORT` into its parts.
    static func split(_ text: String) throws(PatchSyncError) -> (String, Int) {
        let host: Substring, port: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = text[text.index(after: text.startIndex)..<close]
            port = text[text.index(after: close)...].hasPrefix(":") ? text[close...].dropFirst(2) : ""
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        } else {
            host = Substring(text)
            port = Substring(String(defaultPort))
        }
        guard let number = Int(port), (0...65535).contains(number), !host.isEmpty else {
            throw PatchSyncError(.usage, "'\(text)' is not ADDRESS:PORT", remedy: "e.g. --listen 192.168.1.20:\(defaultPort)")
        }
        return (String(host), number)
    }

    /// The IPv4 and IPv6 addresses of this machine's interfaces that are on private networks.
    public static func privateAddresses() -> [String] {
        var found: [String] = []
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var entry = list
        while let item = entry {
            defer { entry = item.pointee.ifa_next }
            guard let address = item.pointee.ifa_addr else { continue }
            var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            let family = Int32(address.pointee.sa_family)
            guard family == AF_INET || family == AF_INET6 else { continue }
            let length = socklen_t(family == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size)
            guard getnameinfo(address, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else { continue }
            let text = String(cString: host)
            if isPrivate(text) && !found.contains(text) { found.append(text) }
        }
        return found
    }

    /// 10/8, 172.16/12, 192.168/16, IPv6 unique local fc00::/7.
    static func isPrivate(_ host: String) -> Bool {
        let v4 = host.split(separator: ".").compactMap { UInt8($0) }
        if v4.count == 4 {
            return v4[0] == 10 || (v4[0] == 172 && (16...31).contains(v4[1])) || (v4[0] == 192 && v4[1] == 168)
        }
        let lower = host.lowercased()
        return lower.hasPrefix("fc") || lower.hasPrefix("fd")
    }

    static func isPrivateOrLoopback(_ host: String) -> Bool {
        isPrivate(host) || host.hasPrefix("127.") || host == "::1" || host == "localhost"
    }

    /// A listening socket on `host:port` (port 0: any free one).
    static func bind(host: String, port: Int) throws(PatchSyncError) -> (Int32, String) {
        var hints = addrinfo()
        hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host == "localhost" ? "127.0.0.1" : host, String(port), &hints, &result) == 0, let info = result else {
            throw PatchSyncError(.usage, "'\(host)' is not a numeric IP address", remedy: "give --listen ADDRESS:PORT, e.g. 192.168.1.20:\(defaultPort)")
        }
        defer { freeaddrinfo(result) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw PatchSyncError.wrap(Errno(errno, "opening a socket for", host)) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        if info.pointee.ai_family == AF_INET6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &yes, socklen_t(MemoryLayout<Int32>.size)) }
        guard Glibc.bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0, listen(fd, 64) == 0 else {
            let code = errno
            close(fd)
            throw PatchSyncError(
                .usage, "cannot listen on \(join(host, port)): \(String(cString: strerror(code)))",
                remedy: "give an address of this machine and a free port with --listen")
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let actual = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Int in
                guard getsockname(fd, pointer, &length) == 0 else { return port }
                if pointer.pointee.sa_family == sa_family_t(AF_INET) {
                    return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
                }
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            }
        }
        return (fd, join(host, actual))
    }
}

/// One bandwidth budget for all of a share's connections: `take` waits until the bytes fit.
///
/// Thread-safety: a `Mutex` holds the budget.
final class TokenBucket: Sendable {
    private let rate: Double
    private let budget: Mutex<(tokens: Double, last: ContinuousClock.Instant)>

    init(bytesPerSecond: Int) {
        rate = Double(bytesPerSecond)
        budget = Mutex((Double(bytesPerSecond) / 10, ContinuousClock.now))
    }

    func take(_ bytes: Int) {
        let wait = budget.withLock { state -> Double in
            let now = ContinuousClock.now
            let elapsed = Double((now - state.last).components.attoseconds) / 1e18 + Double((now - state.last).components.seconds)
            state.tokens = min(rate / 10, state.tokens + elapsed * rate)
            state.last = now
            state.tokens -= Double(bytes)
            return state.tokens < 0 ? -state.tokens / rate : 0
        }
        if wait > 0 { usleep(UInt32(min(wait, 10) * 1_000_000)) }
    }
}
