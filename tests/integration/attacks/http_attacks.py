#!/usr/bin/env python3
"""The attack suite of issue 20 against a real agent (or hub) process.

Usage: http_attacks.py NAME URL PID [ATTACK ...]

Each attack runs against URL while a well-behaved client polls /healthz and /metrics from
another loopback address (127.0.0.2: a Prometheus server on another host, outside the attacker's
per-address share) and the process's resident memory is sampled every 50 ms. An attack passes
when the process is still alive afterwards, its peak RSS stayed within CEILING_KIB of its RSS
before the attack, and every poll of the well-behaved client was answered 200. One line per
attack goes to stdout (the figures docs/security.md records); the exit status is 1 if any failed.
"""
import gzip
import os
import socket
import sys
import threading
import time
import urllib.parse

CEILING_KIB = 32 * 1024
CLIENT_ADDRESS = "127.0.0.2"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def connect(host, port, source=None, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect((host, port))
    return s


def send_until_refused(s, chunk, total):
    sent = 0
    try:
        while sent < total:
            sent += s.send(chunk)
    except OSError:
        pass
    return sent


def read_all(s, limit=1 << 20):
    out = b""
    try:
        while len(out) < limit:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    return out


class WellBehavedClient(threading.Thread):
    """Polls /healthz and /metrics every 200 ms from CLIENT_ADDRESS; counts what was answered."""

    def __init__(self, host, port, token):
        super().__init__(daemon=True)
        self.host, self.port, self.token = host, port, token
        self.asked = 0
        self.answered = 0
        self.failures = []
        self.stop = threading.Event()

    def get(self, path):
        s = connect(self.host, self.port, CLIENT_ADDRESS, timeout=5)
        try:
            auth = f"Authorization: Bearer {self.token}\r\n" if self.token else ""
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n".encode())
            answer = read_all(s, 64 << 20)
            return answer[:12]
        finally:
            s.close()

    def run(self):
        while not self.stop.is_set():
            for path in ("/healthz", "/metrics"):
                self.asked += 1
                try:
                    status = self.get(path)
                    if status.startswith(b"HTTP/1.1 200"):
                        self.answered += 1
                    else:
                        self.failures.append(f"{path}: {status!r}")
                except OSError as e:
                    self.failures.append(f"{path}: {e}")
            self.stop.wait(0.2)


class RssSampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_kib(pid)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, rss_kib(self.pid))
            except (OSError, RuntimeError):
                return
            self.stop.wait(0.05)


# ---- the attacks: each takes (host, port) and returns a short note of what it did.

def huge_header_line(host, port):
    s = connect(host, port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Huge: ")
    sent = send_until_refused(s, b"a" * 65536, 300 << 20)
    s.close()
    return f"{sent >> 20} MiB of a 300 MiB header line taken"


def many_headers(host, port):
    s = connect(host, port)
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(100_000)) + b"\r\n"
    sent = send_until_refused(s, request, len(request))
    answer = read_all(s)[:12]
    s.close()
    return f"{sent} of {len(request)} bytes of 100 000 headers taken, answer {answer!r}"


def chunked_body(host, port):
    s = connect(host, port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % 60000 + b"c" * 60000 + b"\r\n"
    sent = send_until_refused(s, chunk, 200 << 20)
    s.close()
    return f"{sent >> 20} MiB of a 200 MiB chunked body taken"


def gzip_bomb(host, port):
    bomb = gzip.compress(b"\0" * (64 << 20), 9)  # 64 MiB of zeros in ~64 KiB
    s = connect(host, port)
    s.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb))
    sent = send_until_refused(s, bomb, len(bomb))
    answer = read_all(s)[:12]
    s.close()
    s = connect(host, port)
    small = gzip.compress(b"\0" * (8 << 20), 9)[:8000]
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(small) + small)
    answer2 = read_all(s)[:12]
    s.close()
    return f"a {len(bomb)}-byte gzip of 64 MiB: {answer!r} after {sent} bytes; an 8 KB one: {answer2!r}"


def smuggling(host, port):
    notes = []
    hidden = b"GET /api/v1/version?smuggled=1 HTTP/1.1\r\nHost: x\r\n\r\n"
    for framing in (b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % (5 + len(hidden)),
                    b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
                    b"Transfer-Encoding: xchunked\r\n"):
        s = connect(host, port)
        s.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n0\r\n\r\n" + hidden)
        answer = read_all(s)
        s.close()
        responses = answer.count(b"HTTP/1.1 ")
        if responses != 1:
            raise AssertionError(f"{responses} answers to a smuggling attempt: {answer[:200]!r}")
        notes.append(answer[:12].decode(errors="replace"))
    return "one answer each (" + ", ".join(notes) + ")"


def slow_connections(host, port):
    held = []
    for _ in range(1000):
        s = connect(host, port)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        held.append(s)
    time.sleep(3)  # the well-behaved client polls meanwhile
    for s in held:
        s.close()
    return "1000 connections held half a request for 3 s"


def concurrent_scrapes(host, port):
    sockets = []
    for _ in range(2000):
        try:
            s = connect(host, port, timeout=20)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            sockets.append(s)
        except OSError:
            pass
    answered = refused = 0
    for s in sockets:
        status = read_all(s, 16 << 20)[:12]
        s.close()
        if status.startswith(b"HTTP/1.1 200"):
            answered += 1
        else:
            refused += 1
    return f"{answered} of 2000 concurrent scrapes answered, {refused} refused or cut"


def slow_readers(host, port):
    # /metrics asked for on 1000 connections that then read nothing: what the server holds for
    # answers nobody takes.
    held = []
    for _ in range(1000):
        s = connect(host, port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        held.append(s)
    time.sleep(3)
    for s in held:
        s.close()
    return "1000 connections asked for /metrics and read nothing for 3 s"


ATTACKS = {
    "huge-header-line": huge_header_line,
    "100k-headers": many_headers,
    "chunked-body": chunked_body,
    "gzip-bomb": gzip_bomb,
    "smuggling": smuggling,
    "slow-connections": slow_connections,
    "concurrent-scrapes": concurrent_scrapes,
    "slow-readers": slow_readers,
}


def main():
    name, url, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
    wanted = sys.argv[4:] or list(ATTACKS)
    token = os.environ.get("ITHBAT_TOKEN", "")
    u = urllib.parse.urlparse(url)
    host, port = u.hostname, u.port
    failed = False
    for attack in wanted:
        time.sleep(1)  # let the last attack's connections drain
        idle = rss_kib(pid)
        client = WellBehavedClient(host, port, token)
        sampler = RssSampler(pid)
        sampler.start()
        client.start()
        time.sleep(0.5)
        try:
            note = ATTACKS[attack](host, port)
            error = None
        except Exception as e:  # an attack that could not run is a failure too
            note, error = "", f"{type(e).__name__}: {e}"
        time.sleep(0.5)
        client.stop.set()
        client.join()
        sampler.stop.set()
        sampler.join()
        alive = os.path.exists(f"/proc/{pid}")
        delta = sampler.peak - idle
        ok = alive and error is None and delta <= CEILING_KIB and client.answered == client.asked
        failed |= not ok
        print(f"{'PASS' if ok else 'FAIL'} {name} {attack}: idle RSS {idle >> 10} MiB, peak +{delta >> 10} MiB "
              f"(ceiling +{CEILING_KIB >> 10}); well-behaved client {client.answered}/{client.asked} answered"
              f"{'' if alive else '; THE PROCESS DIED'}; {error or note}"
              f"{'; ' + client.failures[0] if client.failures else ''}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
