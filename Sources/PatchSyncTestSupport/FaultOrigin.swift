import Foundation

/// A loopback HTTP origin that serves a real published folder (with Range) and injects one kind of
/// fault, for the transfer engine's tests. A fault hits the first `count` responses for each path
/// that starts with `prefix` (objects by default) or, with a `probability`, each such response with
/// that probability, drawn in arrival order from a generator seeded with `seed` (Python's
/// `random.Random`); other requests are served correctly.
public final class FaultOrigin: @unchecked Sendable {
    public enum Fault: String, Sendable, CaseIterable {
        /// 503 Service Unavailable.
        case unavailable
        /// One body byte flipped.
        case flipped
        /// 404 Not Found.
        case missing
        /// Range ignored: 200 with the whole file.
        case ignoreRange
        /// 206 for another range than asked (shifted by one byte), with a Content-Range that says so.
        case otherRange
        /// 206 without a Content-Range.
        case noContentRange
        /// 206 with a Content-Range that does not parse.
        case malformedContentRange
        /// The connection closes half-way through the body.
        case closeMidBody
        /// Headers without a length, then bytes until the client hangs up (at most 1 GiB).
        case endlessBody
        /// A Content-Length twice what was asked, and that many bytes.
        case oversizedBody
        /// Headers, then nothing.
        case stall
        /// Headers, then the body at 100 bytes a second.
        case trickle
        /// 302 to the same URL, forever.
        case redirectLoop
    }

    private let server: PythonServer

    public var port: Int { server.port }
    public var url: String { server.url }

    /// Every request as "STATUS PATH BODY-BYTES-SENT", in order (a fault that never completes its
    /// body logs what it sent when the client hung up).
    public var requests: [String] { server.logLines }

    /// Requests for objects answered with `status`.
    public func objectRequests(status: Int) -> Int {
        requests.filter { $0.hasPrefix("\(status) /objects/") }.count
    }

    /// Body bytes sent in all responses.
    public var bytesSent: Int64 {
        requests.reduce(0) { $0 + (Int64($1.split(separator: " ").last ?? "") ?? 0) }
    }

    /// Serves `root`, answering the first `count` requests for each path under `prefix` with `fault`;
    /// with `probability`, each request under `prefix` instead, with that probability (`count` is then
    /// unused). `retryAfter`: the Retry-After header of `.unavailable` answers.
    public init(
        root: String, fault: Fault, count: Int = .max, prefix: String = "/objects/",
        probability: Double? = nil, seed: Int = 1, retryAfter: String? = nil
    ) throws {
        server = try PythonServer(
            script: Self.script,
            arguments: [
                root, fault.rawValue, String(min(count, 1 << 40)), prefix, probability.map { String($0) } ?? "",
                String(seed), retryAfter ?? ""
            ])
    }

    private static let script = """
        import collections, os, random, re, socket, sys, threading, time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        root, kind, count, prefix, probability, seed, retry_after, log = sys.argv[1:9]
        count, probability = int(count), float(probability) if probability else None
        seen, lock, rng = collections.Counter(), threading.Lock(), random.Random(int(seed))
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            def log_message(self, *args): pass
            def log(self, status, sent):
                with lock, open(log, "a") as f: f.write(f"{status} {self.path} {sent}\\n")
            def head(self, status, headers):
                self.send_response(status)
                for k, v in headers: self.send_header(k, v)
                self.end_headers()
            def reply(self, status, body=b"", headers=()):
                self.head(status, list(headers) + [("Content-Length", str(len(body)))])
                self.wfile.write(body)
                self.log(status, len(body))
            def slowly(self, status, body, headers, rate):
                # rate 0: stall after the headers; else send `rate` bytes a second until done or hung up.
                self.head(status, list(headers) + [("Content-Length", str(len(body)))])
                sent = 0
                try:
                    if rate == 0:
                        self.log(status, 0); time.sleep(3600)  # logged now: a stall never ends by itself
                    while sent < len(body):
                        self.wfile.write(body[sent:sent + rate // 10]); self.wfile.flush()
                        sent += rate // 10; time.sleep(0.1)
                except OSError: pass
                self.log(status, sent); self.close_connection = True
            def do_GET(self):
                path = self.path.split("?")[0]
                with lock:
                    seen[path] += 1
                    n = seen[path]
                    eligible = path.startswith(prefix)
                    faulty = eligible and (rng.random() < probability if probability is not None else n <= count)
                if faulty and kind == "missing": return self.reply(404)
                if faulty and kind == "unavailable":
                    return self.reply(503, headers=[("Retry-After", retry_after)] if retry_after else [])
                if faulty and kind == "redirectLoop":
                    return self.reply(302, headers=[("Location", self.path)])
                full = os.path.realpath(os.path.join(root, path.lstrip("/")))
                if not full.startswith(os.path.realpath(root)) or not os.path.isfile(full): return self.reply(404)
                data = open(full, "rb").read()
                status, headers = 200, []
                m = re.match(r"bytes=(\\d+)-(\\d*)", self.headers.get("Range", ""))
                if m and not (faulty and kind == "ignoreRange"):
                    start = int(m.group(1)); end = int(m.group(2)) if m.group(2) else len(data) - 1
                    end = min(end, len(data) - 1)
                    if faulty and kind == "otherRange": start, end = start + 1, min(end + 1, len(data) - 1)
                    headers = [("Content-Range", f"bytes {start}-{end}/{len(data)}")]
                    if faulty and kind == "noContentRange": headers = []
                    if faulty and kind == "malformedContentRange": headers = [("Content-Range", "bytes nonsense")]
                    data, status = data[start:end + 1], 206
                if not faulty: return self.reply(status, data, headers)
                if kind == "flipped" and data: data = bytes([data[0] ^ 0x40]) + data[1:]
                if kind == "oversizedBody": data = data + os.urandom(len(data))
                if kind == "stall": return self.slowly(status, data, headers, 0)
                if kind == "trickle": return self.slowly(status, data, headers, 100)
                if kind == "closeMidBody":
                    self.head(status, headers + [("Content-Length", str(len(data)))])
                    half = data[:len(data) // 2]
                    self.wfile.write(half); self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return self.log(status, len(half))
                if kind == "endlessBody":
                    self.head(status, headers + [("Connection", "close")])
                    sent, block = 0, data * (65536 // max(1, len(data)) + 1)
                    try:
                        while sent < 1 << 30:
                            self.wfile.write(block); sent += len(block)
                    except OSError: pass
                    self.close_connection = True
                    return self.log(status, sent)
                self.reply(status, data, headers)
        class Server(ThreadingHTTPServer):
            daemon_threads = True
            def handle_error(self, request, address):  # a client hanging up on a fault is the point
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, address)
        server = Server(("127.0.0.1", 0), Handler)
        print(server.server_address[1], flush=True)
        server.serve_forever()
        """
}
