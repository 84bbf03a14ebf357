import Foundation

/// A loopback HTTP origin that serves a real published folder (with Range) and injects faults
/// per request, for the transfer engine's tests. Faults count per path: `unavailable(n)` answers
/// 503 to the first n requests of each object, `flipped(n)` flips one body byte in the first n
/// responses of each object, `missingObjects` answers 404 for every object (metadata stays served).
public final class FaultOrigin: @unchecked Sendable {
    public enum Fault: Sendable {
        case unavailable(Int)
        case flipped(Int)
        case missingObjects
    }

    private let server: PythonServer

    public var port: Int { server.port }
    public var url: String { server.url }

    /// Every request as "STATUS PATH", in order.
    public var requests: [String] { server.logLines }

    /// Requests for objects answered with `status`.
    public func objectRequests(status: Int) -> Int {
        requests.filter { $0.hasPrefix("\(status) /objects/") }.count
    }

    public init(root: String, fault: Fault) throws {
        let (kind, count): (String, Int)
        switch fault {
        case .unavailable(let n): (kind, count) = ("503", n)
        case .flipped(let n): (kind, count) = ("flip", n)
        case .missingObjects: (kind, count) = ("404", 0)
        }
        server = try PythonServer(script: Self.script, arguments: [root, kind, String(count)])
    }

    private static let script = """
        import collections, os, re, sys, threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        root, kind, count, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
        seen, lock = collections.Counter(), threading.Lock()
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def reply(self, status, body=b"", headers=()):
                with lock, open(log, "a") as f: f.write(f"{status} {self.path}\\n")
                self.send_response(status)
                for k, v in headers: self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            def do_GET(self):
                path = self.path.split("?")[0]
                with lock:
                    seen[path] += 1
                    n = seen[path]
                is_object = path.startswith("/objects/")
                if is_object and kind == "404": return self.reply(404)
                if is_object and kind == "503" and n <= count: return self.reply(503)
                full = os.path.realpath(os.path.join(root, path.lstrip("/")))
                if not full.startswith(os.path.realpath(root)) or not os.path.isfile(full): return self.reply(404)
                data = open(full, "rb").read()
                status, headers = 200, []
                m = re.match(r"bytes=(\\d+)-(\\d*)", self.headers.get("Range", ""))
                if m:
                    start = int(m.group(1)); end = int(m.group(2)) if m.group(2) else len(data) - 1
                    end = min(end, len(data) - 1)
                    headers = [("Content-Range", f"bytes {start}-{end}/{len(data)}")]
                    data, status = data[start:end + 1], 206
                if is_object and kind == "flip" and n <= count and data:
                    data = bytes([data[0] ^ 0x40]) + data[1:]
                self.reply(status, data, headers)
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """
}
