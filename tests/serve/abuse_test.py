"""weft serve against hostile and careless clients, live, on loopback: idle connections by the
thousand, clients trickling their headers, pipelined requests, and bodies built to exhaust it
(nesting bombs, encoded and chunked bodies over the limit, header floods, Range lists, huge
prompts). Throughout, a probe asks /healthz on a fresh connection every 100 ms and must be answered
within a second; the bad requests get their 4xx; the server's resident memory comes back near its
idle level; and SIGTERM with trickling clients connected stops it at once.

    abuse_test.py WEFT            asserts (the test suite)
    abuse_test.py WEFT --report   prints the figures and asserts nothing (for comparing servers)
"""
import gzip
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

weft = os.path.abspath(sys.argv[1])
report = "--report" in sys.argv
failures = []
figures = []


def check(condition, what, detail=""):
    if not condition:
        failures.append(f"{what}: {detail}"[:600])


def figure(name, value):
    figures.append((name, value))
    print(f"  {name}: {value}", flush=True)


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
    except (OSError, AttributeError):
        return float("nan")


class Server:
    def __init__(self, *checkpoints):
        args = [weft, "serve", "--port", "0", "--threads", "1", "--timeout", "2"]
        for c in checkpoints:
            args += ["--checkpoint", c]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        self.port = int(re.search(r"http://[0-9.]+:([0-9]+)", line).group(1))

    def alive(self):
        return self.process.poll() is None


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


# Bytes read past one response on a socket: the next one's start, when pipelined answers arrive in
# one recv (which they do when the test is slower to read than the server to answer).
unread = {}


def read_response(s, limit=64 << 20):
    """One response: (status, headers text, body); status -1 when the connection ended first."""
    data = unread.pop(s, b"")
    while b"\r\n\r\n" not in data:
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionError):
            return -1, "", b""
        if not chunk:
            return -1, "", data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    head = head.decode("latin-1")
    status = int(head.split(" ")[1])
    m = re.search(r"content-length: (\d+)", head, re.I)
    length = int(m.group(1)) if m else None
    while (length is None or len(body) < length) and len(body) < limit:
        try:
            chunk = s.recv(65536)
        except (socket.timeout, ConnectionError):
            break
        if not chunk:
            break
        body += chunk
    if length is None:
        return status, head, body
    unread[s] = body[length:]
    return status, head, body[:length]


def exchange(port, raw, timeout=20):
    """Sends raw bytes (a request) and reads one response; the status, or -1."""
    try:
        s = connect(port, timeout)
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before the whole body is sent
        status, head, body = read_response(s)
        s.close()
        return status, body
    except OSError as e:
        return -1, str(e).encode()


def post(port, path, body, headers=""):
    body = body if isinstance(body, bytes) else body.encode()
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class Probe:
    """Asks /healthz every 100 ms on a new connection; the slowest answer, and the misses."""

    def __init__(self, port):
        self.port, self.worst, self.missed, self.running = port, 0.0, 0, True
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while self.running:
            start = time.perf_counter()
            status, _ = exchange(self.port, f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode(), timeout=5)
            elapsed = time.perf_counter() - start
            self.worst = max(self.worst, elapsed)
            self.missed += status != 200
            time.sleep(max(0.0, 0.1 - elapsed))

    def stop(self):
        self.running = False
        self.thread.join()
        return self.worst, self.missed


def under_probe(server, name, attack):
    probe = Probe(server.port)
    time.sleep(0.3)
    attack()
    worst, missed = probe.stop()
    figure(f"{name}: slowest /healthz", f"{worst * 1000:.0f} ms, {missed} unanswered")
    check(worst < 1.0 and missed == 0, f"{name}: /healthz answered within a second",
          f"slowest {worst:.2f} s, {missed} unanswered")


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))

with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)
    for args in (["--model", "mlp", "--steps", "1", "--batch-size", "8", "--out", "mlp"],
                 ["--model", "gpt", "--layers", "1", "--heads", "2", "--dim", "32", "--context", "32",
                  "--batch-size", "8", "--eval-windows", "16", "--steps", "1", "--out", "gpt"]):
        subprocess.run([weft, "train", "--threads", "1", *args], check=True, capture_output=True)
    server = Server("mlp", "gpt")
    port = server.port
    pixels = json.dumps({"inputs": [[(i * 37) % 256 for i in range(784)]]})
    for _ in range(20):
        exchange(port, post(port, "/v1/predict", pixels))
        exchange(port, post(port, "/v1/completions", json.dumps({"prompt": "ab", "max_tokens": 8})))
    idle_rss = rss_mib(server.process.pid)
    figure("resident memory after warm-up", f"{idle_rss:.0f} MiB")

    # Idle connections by the thousand: the server keeps at most its limit, closing the longest idle.
    def idle():
        held = []
        for _ in range(3000):
            try:
                held.append(connect(port, timeout=2))
            except OSError:
                break
        figure("idle connections opened", len(held))
        time.sleep(3)
        for s in held:
            s.close()
    under_probe(server, "3000 idle connections", idle)

    # Clients that trickle a header line every second and never finish.
    def trickle(count, seconds):
        conns = [connect(port) for _ in range(count)]
        for s in conns:
            s.sendall(f"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
        end = time.time() + seconds
        while time.time() < end:
            for s in conns:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass
            time.sleep(1)
        cut = 0
        for s in conns:
            s.settimeout(0.5)
            try:
                cut += s.recv(100).startswith(b"HTTP/1.1 408") or s.recv(1) == b""
            except OSError:
                pass
            s.close()
        return cut
    under_probe(server, "130 trickling clients", lambda: figure("trickling clients cut off (408 or closed)",
                                                                 trickle(130, 4)))

    # Many connections each holding most of an 8 MiB body: every one of them was kept (3.3 GB at
    # 400); the server holds 128 MiB of unfinished requests and answers the rest 503.
    def unfinished(count):
        size = (8 << 20) - 1000
        head = (f"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {size + 10}\r\n\r\n").encode()
        conns, refused = [], 0
        for _ in range(count):
            s = connect(port)
            try:
                s.sendall(head + b" " * size)
            except OSError:
                pass
            conns.append(s)
        peak = rss_mib(server.process.pid)
        for s in conns:
            s.settimeout(0.2)
            try:
                refused += s.recv(100).startswith(b"HTTP/1.1 503")
            except OSError:
                pass
            s.close()
        figure("unfinished 8 MiB bodies: resident with them held, answered 503", f"{peak:.0f} MiB, {refused} of {count}")
        check(peak < idle_rss + 400, "unfinished bodies are bounded together", f"{peak:.0f} MiB")
        check(refused > 0, "bodies past the bound are answered 503", refused)
    under_probe(server, "100 unfinished 8 MiB bodies", lambda: unfinished(100))

    # Pipelining: three requests in one send, three answers in order.
    s = connect(port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
              b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + post(port, "/v1/predict", pixels))
    answers = [read_response(s)[0] for _ in range(3)]
    s.close()
    figure("three pipelined requests answered", answers)
    check(answers == [200, 404, 200], "pipelined requests are answered in order", answers)

    # Bodies built to exhaust the server: each gets its status, quickly.
    bomb = '{"prompt": "x", "top_k": ' + "[" * 51000 + "]" * 51000 + "}"
    huge_prompt = json.dumps({"prompt": "a" * ((8 << 20) - 100)})
    gz = gzip.compress(json.dumps({"prompt": "a" * (200 << 20)}).encode())
    abusive = [
        ("8 MB of '['", post(port, "/v1/predict", "[" * ((8 << 20) - 1)), 400),
        ("an 8 MB prompt", post(port, "/v1/completions", huge_prompt), 400),
        ("1e400", post(port, "/v1/completions", '{"prompt": "x", "temperature": 1e400}'), 400),
        ("a duplicate key", post(port, "/v1/completions", '{"prompt": "x", "prompt": "y"}'), 400),
        ("a gzip bomb (200 MiB inside)", post(port, "/v1/completions", gz, "Content-Encoding: gzip\r\n"), 415),
        ("40 MiB chunked", f"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           f"Transfer-Encoding: chunked\r\n\r\n".encode() + (b"100000\r\n" + b"1" * (1 << 20) + b"\r\n") * 40
                           + b"0\r\n\r\n", 413),
        ("200 MB of header lines", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Flood: aaaaaaaaaaaaaaaaaaaa\r\n" * 6_000_000, 431),
        ("Content-Length: -5", b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n", 400),
        ("two Content-Lengths", b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400),
        ("a text/plain POST (a web page's)", post(port, "/v1/predict", pixels).replace(b"application/json", b"text/plain"), 415),
        ("another site's Origin", post(port, "/v1/predict", pixels, "Origin: http://evil.example\r\n"), 403),
        ("a rebinding Host", post(port, "/v1/predict", pixels).replace(f"127.0.0.1:{port}".encode(), b"evil.example"), 403),
        # 8 MB of keys: the tree kept 120 MB a request, which stayed resident.
        ("700,000 keys", post(port, "/v1/predict", "{" + ",".join(f'"k{i}":0' for i in range(700000)) + "}"), 400),
        # Last: these killed the server before it bounded JSON nesting.
        ("JSON nested 51,000 deep", post(port, "/v1/completions", bomb), 400),
        ("a pixel nested 51,000 deep", post(port, "/v1/predict", '{"inputs": [' + "[" * 51000 + "]" * 51000 + "]}"), 400),
    ]
    for name, raw, want in abusive:
        start = time.perf_counter()
        status, body = exchange(port, raw)
        elapsed = time.perf_counter() - start
        if not server.alive():
            figure(name, "the server died")
            check(False, f"{name}: the server survives", "it exited")
            break
        figure(name, f"{status} in {elapsed * 1000:.0f} ms, resident {rss_mib(server.process.pid):.0f} MiB")
        check(status == want, f"{name}: answered {want}", f"got {status}: {body[:200]!r}")
        check(elapsed < 5, f"{name}: answered quickly", f"{elapsed:.1f} s")

    if server.alive():
        # Range lists: the answer is the page once, whatever the ranges.
        status, body = exchange(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nRange: bytes=" + b"0-," * 2000 + b"0-\r\n\r\n")
        figure("a Range of 2001 parts on /", f"{status}, {len(body)} bytes")
        check(status == 200 and len(body) < 200_000, "Range lists are not answered part by part", (status, len(body)))
        # A POST without a length whose client half-closes.
        s = connect(port, timeout=5)
        s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n{}")
        s.shutdown(socket.SHUT_WR)
        status = read_response(s)[0]
        s.close()
        figure("a POST without a length, half-closed", status)
        check(status == 411, "a POST without a length is answered 411", status)

        time.sleep(1)
        after_rss = rss_mib(server.process.pid)
        figure("resident memory after the abuse", f"{after_rss:.0f} MiB (idle: {idle_rss:.0f} MiB)")
        check(after_rss < idle_rss + 150, "memory comes back near its idle level", f"{after_rss:.0f} vs {idle_rss:.0f} MiB")

        # SIGTERM while five clients trickle: the server stops at once.
        conns = [connect(port) for _ in range(5)]
        for c in conns:
            c.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        start = time.perf_counter()
        server.process.send_signal(signal.SIGTERM)
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.process.kill()
        elapsed = time.perf_counter() - start
        figure("SIGTERM with 5 trickling clients: exited after", f"{elapsed:.2f} s, status {server.process.returncode}")
        check(elapsed < 2 and server.process.returncode == 0, "SIGTERM stops the server at once", f"{elapsed:.1f} s")
        for c in conns:
            c.close()
    else:
        server.process.wait()

if report:
    sys.exit(0)
for f in failures:
    print("FAILED:", f)
print("weft serve held under abuse" if not failures else f"{len(failures)} failures")
sys.exit(1 if failures else 0)
