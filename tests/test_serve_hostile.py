"""`fanout serve` under hostile requests, round 5 (issue 52, item 8): a bad chunk header is answered without an
ASGI traceback in the server's log (no token needed to cause it), a body shorter than its Content-Length followed
by a half-close gets an answer instead of a dropped connection, and the README's `serve` defaults are the code's.
Loopback only, bounded in time; fake profile.
"""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import pytest

from tests.support.serve import running_serve
from tests.support.vault import write_vault

REPO = Path(__file__).resolve().parents[1]
CONFIG = """extends: fake
serve:
  idle_timeout_s: 2.0
  request_timeout_s: 4.0
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    root = tmp_path_factory.mktemp("serve-hostile")
    db = root / "db"
    index_vault(write_vault(root / "vault"), db, "t", fake_cfg, fake_runner)
    with running_serve(db, "t", CONFIG, root) as info:
        yield {"port": info["port"], "token": info["token"], "log": root / "serve.log"}


def exchange(port: int, raw: bytes, half_close: bool = False, wait: float = 10.0) -> tuple[int | None, dict]:
    """Send raw bytes (then shut the sending side when `half_close`), read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(raw)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while block := s.recv(65536):
                data += block
        except ConnectionResetError:
            pass
    if not data:
        return None, {}
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), (json.loads(body) if body.strip() else {})


BAD_CHUNKS = [b"zz\r\n{}\r\n0\r\n\r\n", b"-1\r\n\r\n", b"2;" + b"x" * 9000 + b"\r\n{}\r\n0\r\n\r\n", b"\r\n\r\n"]


@pytest.mark.parametrize("chunks", BAD_CHUNKS)
def test_a_bad_chunk_header_is_answered_and_logs_no_traceback(server, chunks):
    before = server["log"].read_text(encoding="utf-8", errors="replace")
    status, body = exchange(server["port"], b"POST /query HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                            + chunks)
    assert status in (400, 411) and body.get("error"), (status, body)
    time.sleep(0.3)  # the app's task ends after the answer
    log = server["log"].read_text(encoding="utf-8", errors="replace")[len(before):]
    assert "Traceback" not in log and "Exception in ASGI" not in log, log


@pytest.mark.parametrize("sent", [b'{"token": "x"', b"", b"{"])
def test_a_short_body_then_a_half_close_gets_an_answer(server, sent):
    head = b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    status, body = exchange(server["port"], head + sent, half_close=True)
    assert status == 400 and "Content-Length" in body["error"] and "100" in body["error"], (status, body)


def test_half_closed_headers_get_an_answer(server):
    status, body = exchange(server["port"], b"POST /query HTTP/1.1\r\nHost: x\r\nContent-Le", half_close=True)
    assert status == 400 and "headers" in body["error"], (status, body)


def test_the_readme_serve_defaults_are_the_codes():
    from fanout.config.services import ServeConfig

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    row = next(ln for ln in readme.splitlines() if ln.startswith("| `serve` |"))
    listed = dict(re.findall(r"`(\w+): ([\d.]+)`", row))
    assert listed, row
    for key, value in listed.items():
        assert float(value) == float(getattr(ServeConfig(), key)), (key, value)
