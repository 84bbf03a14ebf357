import Foundation

/// The addresses a share binds and what counts as private.
extension ShareServer {
    /// `host:port`, with brackets around an IPv6 address.
    static func join(_ host: String, _ port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

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
            throw PatchSyncError(
                .usage, "'\(text)' is not ADDRESS:PORT", remedy: "e.g. --listen 192.168.1.20:\(defaultPort)")
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
            guard getnameinfo(address, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else {
                continue
            }
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
        guard getaddrinfo(host == "localhost" ? "127.0.0.1" : host, String(port), &hints, &result) == 0,
            let info = result
        else {
            throw PatchSyncError(
                .usage, "'\(host)' is not a numeric IP address",
                remedy: "give --listen ADDRESS:PORT, e.g. 192.168.1.20:\(defaultPort)")
        }
        defer { freeaddrinfo(result) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw PatchSyncError.wrap(Errno(errno, "opening a socket for", host)) }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        if info.pointee.ai_family == AF_INET6 {
            setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &yes, socklen_t(MemoryLayout<Int32>.size))
        }
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
                    return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                        Int(UInt16(bigEndian: $0.pointee.sin_port))
                    }
                }
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                    Int(UInt16(bigEndian: $0.pointee.sin6_port))
                }
            }
        }
        return (fd, join(host, actual))
    }
}
