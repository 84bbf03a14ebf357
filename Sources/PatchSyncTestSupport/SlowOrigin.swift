import Foundation

/// A loopback HTTP server that misbehaves slowly, for slow-retrieval tests: `stall` sends
/// headers then nothing; `trickle(bytesPerSecond)` sends a long body at that rate. It counts
/// the requests it received.
public final class SlowOrigin: @unchecked Sendable {
    public enum Mode: Sendable {
        case stall
        case trickle(bytesPerSecond: Int)
    }

    private let server: PythonServer

    public var port: Int { server.port }
    public var url: String { server.url }

    /// Requests received so far.
    public var requests: Int { server.logLines.count }

    public init(_ mode: Mode) throws {
        let rate: Int
        switch mode {
        case .stall: rate = 0
        case .trickle(let bytes): rate = bytes
        }
        server = try PythonServer(script: Self.script, arguments: [String(rate)])
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
