import Foundation

/// A real nginx serving a folder on a free loopback port, started and stopped by
/// tests and the demo: real Range, keep-alive and status behaviour, and an access
/// log that counts what the origin sent.
public final class NginxOrigin: @unchecked Sendable {
    public let root: String
    public let port: Int
    private let directory: String
    private let process: Process

    /// The certificate authority of an https origin, for clients to trust.
    public private(set) var caFile: String?

    /// Starts nginx serving `root`; `rateLimit` (e.g. "2m") slows each response, for kill tests;
    /// `tls` serves https (and HTTP/2) with a certificate from a CA made for this origin;
    /// `redirectTo` answers every request with a 302 to that base URL plus the request's path.
    /// `alsoOn` listens on that address too, on the same port (a bridge's, for players in namespaces).
    /// `cacheFor` makes it a lancache-style cache in front of that origin URL instead (`slice 1m`,
    /// `proxy_cache`, each slice cached by URI and range; `X-Cache` says HIT or MISS).
    public init(
        root: String, rateLimit: String? = nil, tls: Bool = false, redirectTo: String? = nil,
        cacheFor upstream: String? = nil,
        alsoOn address: String? = nil
    ) throws {
        self.root = root
        directory = NSTemporaryDirectory() + "patchsync-nginx-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory + "/tmp", withIntermediateDirectories: true)
        port = try Self.freePort()
        if tls { caFile = try TestCertificates.make(in: directory) }
        var conf = Self.configuration(root: root, directory: directory, port: port, rateLimit: rateLimit, tls: tls)
        if let address, !tls {
            conf = conf.replacingOccurrences(
                of: "listen 127.0.0.1:\(port);", with: "listen 127.0.0.1:\(port); listen \(address):\(port);")
        }
        if let upstream {
            try FileManager.default.createDirectory(atPath: directory + "/cache", withIntermediateDirectories: true)
            conf = conf.replacingOccurrences(
                of: "    server {",
                with:
                    "    proxy_cache_path \(directory)/cache levels=1:2 keys_zone=slices:10m max_size=4g inactive=1d use_temp_path=off;\n    server {"
            )
            conf = conf.replacingOccurrences(
                of: "location / { ",
                with: "location / { slice 1m; proxy_cache slices; proxy_cache_key $uri$slice_range; "
                    + "proxy_set_header Range $slice_range; proxy_http_version 1.1; proxy_cache_valid 200 206 1d; "
                    + "add_header X-Cache $upstream_cache_status always; proxy_pass \(upstream); ")
        }
        if let redirectTo {
            conf = conf.replacingOccurrences(
                of: "location / { ", with: "location / { return 302 \(redirectTo)$request_uri; ")
        }
        try conf.write(toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = URL(fileURLWithPath: try Self.nginxPath())
        process.arguments = ["-p", directory, "-c", directory + "/nginx.conf", "-e", directory + "/error.log"]
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.run()
        try waitUntilListening()
    }

    /// Stops nginx and removes its folder (configuration, logs, cache): a test suite run thousands of
    /// times must not fill the temporary folder.
    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    public var url: String { "\(caFile == nil ? "http" : "https")://127.0.0.1:\(port)" }

    /// Stops nginx (fast shutdown) and waits for it.
    public func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }

    /// Freezes nginx (SIGSTOP to the master and its workers): connections are accepted by the kernel,
    /// and no byte comes back, as from an origin that hangs. ``thaw()`` lets it go on.
    public func freeze() { signalAll(SIGSTOP) }

    public func thaw() { signalAll(SIGCONT) }

    private func signalAll(_ signal: Int32) {
        let master = process.processIdentifier
        var pids = [master]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(name), let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, Int32(fields[1]) == master { pids.append(pid) }
        }
        for pid in pids { kill(pid, signal) }
    }

    /// One served request from the access log.
    public struct Request: Sendable {
        public var method: String
        public var path: String
        public var status: Int
        public var bodyBytes: Int64
        /// nginx's serial number of the connection that carried the request.
        public var connection: Int
        /// "HTTP/1.1" or "HTTP/2.0".
        public var httpProtocol: String
        public var range: String
    }

    /// Every request served so far.
    public func requests() -> [Request] {
        guard let log = try? String(contentsOfFile: directory + "/access.log", encoding: .utf8) else { return [] }
        return log.split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            guard f.count >= 7, let status = Int(f[2]), let bytes = Int64(f[3]), let connection = Int(f[4]) else {
                return nil
            }
            return Request(
                method: f[0], path: f[1], status: status, bodyBytes: bytes, connection: connection,
                httpProtocol: f[5], range: f[6...].joined(separator: " "))
        }
    }

    /// Body bytes of successful responses (2xx) for paths with `prefix` (all when nil).
    public func bytesServed(under prefix: String? = nil) -> Int64 {
        requests().filter { (200..<300).contains($0.status) && (prefix == nil || $0.path.hasPrefix(prefix!)) }
            .reduce(0) { $0 + $1.bodyBytes }
    }

    private static func configuration(
        root: String, directory: String, port: Int, rateLimit: String?,
        tls: Bool
    ) -> String {
        let user = getuid() == 0 ? "user root root;" : ""
        let listen =
            tls
            ? "listen 127.0.0.1:\(port) ssl http2; ssl_certificate \(directory)/server.pem; "
                + "ssl_certificate_key \(directory)/server.key;"
            : "listen 127.0.0.1:\(port);"
        return """
            daemon off;
            \(user)
            worker_processes 1;
            pid \(directory)/nginx.pid;
            error_log \(directory)/error.log warn;
            events { worker_connections 512; }
            http {
                default_type application/octet-stream;
                log_format counts '$request_method $uri $status $body_bytes_sent $connection $server_protocol $http_range';
                access_log \(directory)/access.log counts;
                client_body_temp_path \(directory)/tmp;
                proxy_temp_path \(directory)/tmp;
                fastcgi_temp_path \(directory)/tmp;
                uwsgi_temp_path \(directory)/tmp;
                scgi_temp_path \(directory)/tmp;
                sendfile on;
                keepalive_requests 100000;
                keepalive_timeout 600s;
                server {
                    \(listen)
                    root \(root);
                    location / { \(rateLimit.map { "limit_rate \($0);" } ?? "") }
                }
            }
            """
    }

    private static func nginxPath() throws -> String {
        for path in ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        where FileManager.default.isExecutableFile(atPath: path) { return path }
        throw NSError(
            domain: "NginxOrigin", code: 1,
            userInfo: [NSLocalizedDescriptionKey: "nginx is not installed: run `make test` (it installs it)"])
    }

    /// A port the kernel reports free (bind to 0, read it back, close).
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard ok else { throw NSError(domain: "NginxOrigin", code: 2) }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    /// Waits (bounded, 10 s) until nginx accepts connections.
    private func waitUntilListening() throws {
        let listening = Poll.until(timeout: .seconds(10), every: .milliseconds(50)) {
            guard process.isRunning else { return true }
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_port = in_port_t(UInt16(port).bigEndian)
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &addr) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            close(fd)
            return connected
        }
        if listening, process.isRunning { return }
        let log = (try? String(contentsOfFile: directory + "/error.log", encoding: .utf8)) ?? ""
        throw NSError(
            domain: "NginxOrigin", code: 3,
            userInfo: [NSLocalizedDescriptionKey: "nginx did not start on port \(port): \(log)"])
    }
}

/// A certificate authority and a server certificate for 127.0.0.1, made with the openssl tool.
enum TestCertificates {
    /// Writes ca.pem, server.pem and server.key into `directory`; returns the CA's path.
    static func make(in directory: String) throws -> String {
        let ext = directory + "/server.ext"
        try "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n".write(
            toFile: ext, atomically: true, encoding: .utf8)
        let steps: [[String]] = [
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=PatchSync Test CA"
            ],
            [
                "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1"
            ],
            [
                "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.pem", "-days", "2", "-extfile", ext
            ]
        ]
        for arguments in steps {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = arguments
            process.currentDirectoryURL = URL(fileURLWithPath: directory)
            process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            process.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else {
                throw NSError(
                    domain: "TestCertificates", code: Int(process.terminationStatus),
                    userInfo: [NSLocalizedDescriptionKey: "openssl \(arguments[0]) failed"])
            }
        }
        return directory + "/ca.pem"
    }
}
