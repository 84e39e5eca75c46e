"""Raw HTTP exchanges with a running `fanout serve` (tests/support/serve.py starts one)."""

from __future__ import annotations

import json
import socket


def exchange(port: int, raw: bytes, wait: float = 10.0) -> tuple[int | None, dict]:
    """Send raw bytes, read until the server closes: (status, JSON body), or (None, {}) for no answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(raw)
        data = b""
        while block := s.recv(65536):
            data += block
    if not data:
        return None, {}
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), (json.loads(body) if body.strip() else {})


def post(port: int, body: bytes, headers: str | None = None) -> tuple[int | None, dict]:
    if headers is None:
        headers = f"Content-Length: {len(body)}\r\n"
    return exchange(port, f"POST /query HTTP/1.0\r\nHost: x\r\n{headers}\r\n".encode() + body)


def ask(server, request) -> tuple[int | None, dict]:
    return post(server["port"], json.dumps({"token": server["token"], "request": request}).encode())
