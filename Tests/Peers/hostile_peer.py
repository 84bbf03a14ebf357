"""A LAN peer that misbehaves, in front of a real share (patchsync share): the tests of `sync --peer`.

usage: hostile_peer.py UPSTREAM MODE [N]
  flip      forwards, with the first byte of every chunk flipped (the right length, the wrong bytes)
  vanish    forwards N chunks, then sends half of the next one and exits (its port then refuses)
  slow      answers each request with its headers, then 100 bytes a second
  empty     answers every request 404 at once (a peer that holds nothing)
  late404   answers every request 404 after 1.8 s (just under the 2 s a peer once had)
  redirect  answers every request 302 to the same path at UPSTREAM (a peer must never be followed)
  turncoat  forwards N requests (it passes a probe), then answers 404 after 0.45 s each (just under
            a peer's time per answer: the most a peer can cost without a single late answer)
  stall     answers each request with its headers, then nothing
  crowded   forwards, on N connections at most at once: a connection beyond them it answers 503 with
            Retry-After: 1 at once and closes (an honest share with few places)
  moment    answers every request 503 with Retry-After: 1 at once (a peer that always asks for a moment)
Prints the port it listens on (127.0.0.1), then "asked" for each request, until killed.
"""
import os, socket, sys, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

upstream, mode = sys.argv[1], sys.argv[2]
limit = int(sys.argv[3]) if len(sys.argv) > 3 else 0
served, lock = [0], threading.Lock()
busy = [0]  # connections held, in mode crowded

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms wait for a delayed ACK
    def log_message(self, *args): pass
    def do_GET(self):
        with lock:
            print("asked", flush=True)
        if mode == "turncoat":
            with lock:
                served[0] += 1
                honest = served[0] <= limit
            if not honest:
                time.sleep(0.45)
                self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        if mode == "moment":
            self.later(); return
        if mode in ("empty", "late404"):
            if mode == "late404":
                time.sleep(1.8)
            self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers(); return
        if mode == "redirect":
            self.send_response(302); self.send_header("Location", upstream + self.path)
            self.send_header("Content-Length", "0"); self.end_headers(); return
        self.forward()

    def later(self):
        self.send_response(503); self.send_header("Retry-After", "1"); self.send_header("Content-Length", "0")
        self.end_headers()

    def forward(self):
        try:
            with urllib.request.urlopen(upstream + self.path, timeout=10) as answer:
                body, status = answer.read(), answer.status
        except urllib.error.HTTPError as error:
            body, status = b"", error.code
        if status != 200 or not body:
            self.send_response(status); self.send_header("Content-Length", "0"); self.end_headers(); return
        if mode == "flip":
            body = bytes([body[0] ^ 0x55]) + body[1:]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode == "stall":
            self.wfile.flush(); time.sleep(3600)
            return
        if mode == "slow":
            for start in range(0, len(body), 10):
                self.wfile.write(body[start:start + 10]); self.wfile.flush(); time.sleep(0.1)
            return
        if mode == "vanish":
            with lock:
                served[0] += 1
                gone = served[0] > limit
            if gone:
                self.wfile.write(body[:len(body) // 2]); self.wfile.flush()
                os._exit(0)
        self.wfile.write(body)

class Server(ThreadingHTTPServer):
    daemon_threads = True
    def handle_error(self, request, address): pass
    def process_request(self, request, client_address):
        if mode == "crowded":
            with lock:
                full = busy[0] >= limit
                if not full:
                    busy[0] += 1
            if full:
                with lock:
                    print("asked", flush=True)  # a request it turned away
                try:  # its request read first: no reset that could discard the answer
                    request.settimeout(1); request.recv(65536)
                except OSError:
                    pass
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                self.shutdown_request(request)
                return
        super().process_request(request, client_address)
    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            if mode == "crowded":
                with lock:
                    busy[0] -= 1

server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
