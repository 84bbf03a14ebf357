import Foundation

/// A loopback HTTP server that misbehaves slowly, for slow-retrieval tests: `stall` sends
/// headers then nothing; `trickle(bytesPerSecond)` sends a long body at that rate. It counts
/// the requests it received.
public final class SlowOrigin: @unchecked Sendable {
    public enum Mode: Sendable {
        case stall
        case trickle(bytesPerSecond: Int)
    }

    public let port: Int
    private let process: Process
    private let countFile: String

    public var url: String { "http://127.0.0.1:\(port)" }

    /// Requests received so far.
    public var requests: Int {
        (try? String(contentsOfFile: countFile, encoding: .utf8)).map { $0.split(separator: "\n").count } ?? 0
    }

    public init(_ mode: Mode) throws {
        countFile = NSTemporaryDirectory() + "slow-origin-\(UUID().uuidString).log"
        FileManager.default.createFile(atPath: countFile, contents: nil)
        let rate: Int
        switch mode {
        case .stall: rate = 0
        case .trickle(let bytes): rate = bytes
        }
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", Self.script, String(rate), countFile]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let line = out.fileHandleForReading.availableData
        guard let port = Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            process.terminate()
            throw NSError(domain: "SlowOrigin", code: 1, userInfo: [NSLocalizedDescriptionKey: "server did not start"])
        }
        self.port = port
    }

    deinit {
        kill(process.processIdentifier, SIGKILL)  // a child spawned by a test thread inherits SIGTERM blocked
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: countFile)
    }

    private static let script = """
        import socket, sys, threading, time
        rate, log = int(sys.argv[1]), sys.argv[2]
        server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0)); server.listen(16)
        print(server.getsockname()[1], flush=True)
        def serve(conn):
            try:
                request = conn.recv(65536).split(b"\\r\\n")[0]
                with open(log, "a") as f: f.write(request.decode(errors="replace") + "\\n")
                conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 400000\\r\\nContent-Type: application/json\\r\\n\\r\\n")
                if rate == 0:
                    time.sleep(3600)
                step = max(1, rate // 10)
                while True:
                    conn.sendall(b" " * step); time.sleep(0.1)
            except OSError:
                pass
            finally:
                conn.close()
        while True:
            conn, _ = server.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
        """
}
