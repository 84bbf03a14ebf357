"""A fault-injecting proxy in front of the S3-compatible test server (s3_server.py), for PatchSync's upload
tests: what a flaky store does to an upload, on a schedule a seed fixes. Python's standard library only.

Usage: fault_proxy.py --upstream http://127.0.0.1:PORT [--port 0] [--seed N] [--fault-rate 0.3]
                      [--faults 503,500,cut,slow] [--methods GET,HEAD,PUT,POST,DELETE]
                      [--slow-seconds 0.3] [--log FILE]

Prints the port it listens on (127.0.0.1) as the first line of standard output, then forwards every request
to the upstream as it came: the same method, request target (still percent-encoded, with its query),
headers and body. The Host header is forwarded unchanged, so the AWS SigV4 signature the client made for
the proxy's address (it signs the Host it connects to) verifies at the store; only the hop-by-hop headers
(Connection, Keep-Alive, Transfer-Encoding, Expect, ...) are the proxy's own business. The store's answer
goes back with its status, headers and body.

Faults. Each request draws from a generator seeded with the seed, its method and target, and how many
times that method and target were asked before, so the n-th attempt at a request meets the same fault
whatever order parallel requests arrive in. With probability --fault-rate it meets one of --faults:
  503   answered 503 with S3's SlowDown error body; the store never sees it
  500   answered 500 with S3's InternalError error body; the store never sees it
  cut   the connection is closed: before the request is forwarded (cut-before), or once the store has
        answered, half way through the answer (cut-after: the store applied the request, the client
        never learns it)
  slow  forwarded after --slow-seconds
A request with "Expect: 100-continue" that draws 503 or 500 is answered before its body is sent, and its
connection closed, as S3 does; others are answered once their body is read.

Log (--log FILE): one line per request, written before the client gets any answer:
  METHOD TARGET FAULT STORE_STATUS
FAULT is none, 503, 500, cut-before, cut-after or slow; STORE_STATUS is the status the store answered, or
"-" when the request never reached it. The order of the lines is the order in which requests were decided.

Standard input: a line "rate R" sets the fault rate from then on; each line is answered "OK". The proxy
exits when its standard input closes (the test that started it went away).
"""
import argparse
import http.client
import http.server
import random
import socket
import struct
import sys
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "expect",
}

# fault -> (status, reason, S3 error code, message)
ERRORS = {
    "503": (503, "Service Unavailable", "SlowDown", "Please reduce your request rate."),
    "500": (500, "Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
}

FAULTS = ("503", "500", "cut", "slow")


class Schedule:
    """Which fault each request meets: a function of the seed, the request and its attempt number."""

    def __init__(self, seed, rate, faults, methods):
        self.seed = seed
        self.rate = rate
        self.faults = faults
        self.methods = methods
        self.asked = {}
        self.lock = threading.Lock()

    def set_rate(self, rate):
        with self.lock:
            self.rate = rate

    def choose(self, method, target):
        with self.lock:
            attempt = self.asked.get((method, target), 0)
            self.asked[(method, target)] = attempt + 1
            rate = self.rate
        draw = random.Random(f"{self.seed}:{method}:{target}:{attempt}")
        if method not in self.methods or draw.random() >= rate:
            return "none"
        fault = draw.choice(self.faults)
        if fault == "cut":
            return draw.choice(("cut-before", "cut-after"))
        return fault


class Log:
    """The request log: one line per request, appended and flushed under a lock."""

    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8") if path else None
        self.lock = threading.Lock()

    def write(self, method, target, fault, status):
        if self.file is None:
            return
        with self.lock:
            self.file.write(f"{method} {target} {fault} {'-' if status is None else status}\n")
            self.file.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.upstream = None  # this client connection's own connection to the store

    def finish(self):
        if self.upstream is not None:
            self.upstream.close()
        super().finish()

    def log_message(self, format, *args):
        pass  # the --log file is the record

    def parse_request(self):
        self.fault = None
        return super().parse_request()

    def handle_expect_100(self):
        self.fault = self.server.schedule.choose(self.command, self.path)
        if self.fault in ERRORS:
            return True  # answered by proxy() before the body is sent: no "100 Continue"
        return super().handle_expect_100()

    def do_GET(self):
        self.proxy()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def proxy(self):
        decided_early = self.fault is not None
        if not decided_early:
            self.fault = self.server.schedule.choose(self.command, self.path)
        fault = self.fault
        if fault == "cut-before":
            self.record(None)
            return self.cut()
        if fault in ERRORS:
            if decided_early:
                self.close_connection = True  # the body, if the client sends it anyway, is never read
            elif self.read_body() is None:
                return self.give_up()
            self.record(None)
            return self.answer_error(ERRORS[fault])
        body = self.read_body()
        if body is None:
            return self.give_up()
        if fault == "slow":
            time.sleep(self.server.slow_seconds)
        try:
            status, reason, headers, data = self.forward(body)
        except (OSError, http.client.HTTPException) as error:
            self.record(None)
            self.close_connection = True
            return self.answer(502, "Bad Gateway", [("Content-Type", "text/plain")], f"the store: {error}\n".encode())
        self.record(status)
        head, payload = self.response_bytes(status, reason, headers, data)
        if fault == "cut-after":
            # Half way through the body; an answer without one inside its status line, since curl takes
            # a header block that the connection's end cuts short for a whole answer.
            self.wfile.write(head + payload[: len(payload) // 2] if payload else head[: head.index(b" ") + 2])
            return self.cut()
        self.wfile.write(head + payload)
        self.wfile.flush()

    def record(self, status):
        self.server.log.write(self.command, self.path, self.fault, status)

    def read_body(self):
        """The request's body (Content-Length or chunked); None when the client went away first."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self.read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        return data if len(data) == length else None

    def read_chunked(self):
        parts = []
        while True:
            line = self.rfile.readline(65537)
            if not line:
                return None
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            chunk = self.rfile.read(size + 2)
            if len(chunk) < size + 2:
                return None
            parts.append(chunk[:size])

    def forward(self, body):
        """Sends the request to the store (again once on a fresh connection if the kept one was closed);
        returns its status, reason, headers and body."""
        headers = [(name, value) for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP]
        if body and not any(name.lower() == "content-length" for name, _ in headers):
            headers.append(("Content-Length", str(len(body))))  # a chunked request, forwarded whole
        for attempt in (0, 1):
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(self.server.upstream_host, self.server.upstream_port, timeout=120)
            try:
                self.upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in headers:
                    self.upstream.putheader(name, value)
                self.upstream.endheaders(body if body else None)
                response = self.upstream.getresponse()
                data = response.read()
                return response.status, response.reason, response.getheaders(), data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.upstream.close()
                self.upstream = None
                if attempt == 1:
                    raise

    def response_bytes(self, status, reason, headers, data):
        """The answer as it goes on the wire, head and body: the store's headers but hop-by-hop ones, and a
        Content-Length."""
        lines = [f"HTTP/1.1 {status} {reason}"]
        for name, value in headers:
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                lines.append(f"{name}: {value}")
        if self.command == "HEAD":
            lines += [f"Content-Length: {value}" for name, value in headers if name.lower() == "content-length"][:1]
            data = b""
        elif status >= 200 and status not in (204, 304):
            lines.append(f"Content-Length: {len(data)}")
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), data

    def answer(self, status, reason, headers, body):
        head, payload = self.response_bytes(status, reason, headers + [("Content-Length", str(len(body)))], body)
        self.wfile.write(head + payload)
        self.wfile.flush()

    def answer_error(self, error):
        status, reason, code, message = error
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<Resource>{escape(self.path)}</Resource><RequestId>fault-proxy</RequestId></Error>"
        ).encode()
        self.answer(status, reason, [("Content-Type", "application/xml")], body)

    def cut(self):
        """Closes the connection at once, with a reset: whatever was not written is never written."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass

    def give_up(self):
        """The client went away in the middle of its request: nothing to answer."""
        self.close_connection = True


class Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


def arguments():
    parser = argparse.ArgumentParser(description="A fault-injecting proxy in front of an S3-compatible store.")
    parser.add_argument("--upstream", required=True, help="the store's endpoint, http://HOST:PORT")
    parser.add_argument("--port", type=int, default=0, help="the port to listen on (0: any free one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--faults", default=",".join(FAULTS), help="some of " + ",".join(FAULTS))
    parser.add_argument("--methods", default="GET,HEAD,PUT,POST,DELETE", help="the methods that may meet a fault")
    parser.add_argument("--slow-seconds", type=float, default=0.3)
    parser.add_argument("--log", help="the request log to append to")
    args = parser.parse_args()
    args.faults = [fault for fault in args.faults.split(",") if fault]
    unknown = [fault for fault in args.faults if fault not in FAULTS]
    if unknown or not args.faults:
        parser.error(f"--faults: {','.join(unknown) or 'none given'}: each must be one of {','.join(FAULTS)}")
    if not 0.0 <= args.fault_rate <= 1.0:
        parser.error("--fault-rate must be between 0 and 1")
    args.methods = {method.upper() for method in args.methods.split(",") if method}
    return args


def main():
    args = arguments()
    upstream = urllib.parse.urlsplit(args.upstream)
    if upstream.scheme != "http" or not upstream.hostname:
        sys.exit(f"fault_proxy.py: --upstream {args.upstream}: give http://HOST:PORT")
    server = Proxy(("127.0.0.1", args.port), Handler)
    server.upstream_host = upstream.hostname
    server.upstream_port = upstream.port or 80
    server.schedule = Schedule(args.seed, args.fault_rate, args.faults, args.methods)
    server.log = Log(args.log)
    server.slow_seconds = args.slow_seconds
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "rate":
            server.schedule.set_rate(float(words[1]))
        print("OK", flush=True)
    server.shutdown()


if __name__ == "__main__":
    main()
