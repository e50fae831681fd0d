#!/usr/bin/env python3
"""Opens K WebSocket subscribers that read their greeting and then never read again.

    stalled_subscribers.py HOST:PORT STREAM K SECONDS

Each socket has a 4 KiB receive buffer (SO_RCVBUF), so the server's writes to it stall within a
few frames. Holds them SECONDS, then prints how many the server closed meanwhile (an EOF or a
reset once we read again) and exits. Standard library only.
"""
import base64
import os
import socket
import sys
import time


def main() -> None:
    addr, stream, k, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    host, port = addr.rsplit(":", 1)
    socks = []
    for _ in range(k):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, int(port)))
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(
            (
                f"GET /{stream} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(1)
            if not chunk:
                raise SystemExit("closed during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise SystemExit(f"no 101: {head[:80]!r}")
        socks.append(s)
    print(f"stalled {len(socks)} subscribers", flush=True)
    time.sleep(seconds)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            while True:
                data = s.recv(1 << 20)
                if not data:
                    closed += 1
                    break
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    print(f"closed by the server: {closed} of {len(socks)}", flush=True)


if __name__ == "__main__":
    main()
