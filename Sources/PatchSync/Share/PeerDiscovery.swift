import Foundation

/// DNS-SD for LAN shares through Avahi, where its daemon runs: a share announces `_patchsync._tcp`
/// with its repository in a TXT record (`avahi-publish-service`), and a sync browses for the shares of
/// its own repository (`avahi-browse`). Without Avahi nothing is announced or found, and `--peer`
/// names peers by hand.
public enum PeerDiscovery {
    public static let serviceType = "_patchsync._tcp"

    static func tool(_ name: String) -> String? {
        for folder in ["/usr/bin", "/usr/local/bin", "/bin"]
        where FileManager.default.isExecutableFile(atPath: folder + "/" + name) {
            return folder + "/" + name
        }
        return nil
    }

    /// Announces a share of `repository` on `port` until the returned process is terminated; nil when
    /// Avahi's tools are not installed (a daemon that is not running makes the process exit at once).
    public static func announce(repository: String, port: Int) -> Process? {
        guard let publish = tool("avahi-publish-service") ?? tool("avahi-publish") else { return nil }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: publish)
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "player"
        let name = "PatchSync on \(host) \(repository.prefix(8))"
        process.arguments =
            (publish.hasSuffix("avahi-publish") ? ["-s"] : []) + [name, serviceType, String(port), "repo=\(repository)"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return nil }
        return process
    }

    /// The shares of `repository` that Avahi resolves within `timeout` seconds, as base URLs, at most
    /// ``PeerPolicy/maxProbed`` (a network may announce any number); empty without Avahi.
    public static func browse(repository: String, timeout: TimeInterval = 3) -> [String] {
        guard let browse = tool("avahi-browse") else { return [] }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: browse)
        process.arguments = ["--resolve", "--parsable", "--terminate", "--no-db-lookup", serviceType]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        do { try process.run() } catch { return [] }
        let killer = DispatchWorkItem { if process.isRunning { process.terminate() } }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: killer)
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        killer.cancel()
        return peers(inBrowseOutput: String(decoding: data, as: UTF8.self), repository: repository)
    }

    /// The base URLs of the resolved services (`=` lines of `avahi-browse --parsable`) whose TXT
    /// record names `repository`, the first `limit`; link-local IPv6 addresses (which need an
    /// interface) are left out.
    static func peers(inBrowseOutput text: String, repository: String, limit: Int = PeerPolicy.maxProbed) -> [String] {
        var urls: [String] = []
        for line in text.split(separator: "\n") where line.hasPrefix("=;") && urls.count < limit {
            let fields = line.split(separator: ";", omittingEmptySubsequences: false).map(String.init)
            guard fields.count >= 10, let port = Int(fields[8]), (1...65535).contains(port),
                fields[9...].joined(separator: ";").contains("\"repo=\(repository)\"")
            else { continue }
            let address = fields[7]
            guard !address.lowercased().hasPrefix("fe80"), !address.isEmpty,
                address.allSatisfy({ $0.isHexDigit || $0 == "." || $0 == ":" })
            else { continue }
            let url = "http://" + ShareServer.join(address, port)
            if !urls.contains(url) { urls.append(url) }
        }
        return urls
    }
}
