#!/usr/bin/env python3
"""A hostile HTTP peer for tests/integration/http_attacks.sh.

Usage: hostile_server.py --port P [--mode metrics|agent] [...]

Answers every request with the next of: an endless header line, 100 000 headers, an endless
chunked body, a gzip bomb (64 MiB of zeros, declared gzip), and a body dripped a byte every
200 ms. As `-m vllm.entrypoints.openai.api_server` its command line is a vLLM server's, so the
agent finds it and scrapes it (--mode metrics); as --mode agent the hub pulls it as an agent.
Extra arguments are ignored (vLLM's own flags).
"""
import argparse
import gzip
import itertools
import socket
import threading
import time

BOMB = b""  # made after the socket listens: compressing 64 MiB takes a second


def send_forever(conn, chunk, limit=1 << 30):
    sent = 0
    try:
        while sent < limit:
            sent += conn.send(chunk)
    except OSError:
        pass


def endless_header_line(conn):
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Huge: ")
    send_forever(conn, b"a" * 65536)


def many_headers(conn):
    conn.sendall(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(100_000)) + b"\r\n")


def endless_chunked(conn):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
    send_forever(conn, b"%x\r\n" % 60000 + b"x" * 60000 + b"\r\n")


def gzip_bomb(conn):
    global BOMB
    with LOCK:
        if not BOMB:
            BOMB = gzip.compress(b"\0" * (64 << 20), 9)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                 % len(BOMB) + BOMB)


def drip(conn):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n")
    try:
        for _ in range(100000):
            conn.send(b"#")
            time.sleep(0.2)
    except OSError:
        pass


ANSWERS = itertools.cycle([endless_header_line, many_headers, endless_chunked, gzip_bomb, drip])
LOCK = threading.Lock()


def handle(conn):
    conn.settimeout(30)
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            got = conn.recv(65536)
            if not got:
                return
            data += got
        with LOCK:
            answer = next(ANSWERS)
        answer(conn)
    except OSError:
        pass
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", default="metrics")
    args, _ = p.parse_known_args()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", args.port))
    s.listen(64)
    while True:
        conn, _ = s.accept()
        print("accepted a connection", flush=True)  # the test counts these
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
