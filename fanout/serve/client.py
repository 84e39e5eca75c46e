"""The client side of `fanout serve`: find a warm server for a db and config (its port file), and post one
request to it. The CLI's warm path imports this module alone: only the stdlib, no pathlib, no logging until
something is logged, and one HTTP/1.0 request over a plain socket.

The port file `<db>/.fanout-serve.json` (mode 0600: port, pid, config, a random token that every request
must carry) is written by the server (fanout/serve/http.py); without it, when the server does not answer, or
when it runs another config, the caller searches in-process (`FANOUT_NO_SERVER=1` forces that).
"""

from __future__ import annotations

import json
import os
import socket

TYPE_CHECKING = False  # typing itself costs the warm client ~5 ms of import, pathlib ~8 ms (urllib, ipaddress)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

from fanout.defaults import ENV_NO_SERVER
from fanout.errors import UserError


def _log() -> Any:
    """This module's logger, imported on first use: the warm client's path never logs (~20 ms of imports)."""
    import logging

    return logging.getLogger(__name__)


PORT_FILE = ".fanout-serve.json"
ANSWER_HINT = "POST /query with a JSON body, or GET /health"  # what the server answers, for its refusals


def config_key(config: str | None) -> str:
    """The config a process runs, as a comparable string (a YAML path made absolute)."""
    name = str(config or os.environ.get("FANOUT_CONFIG") or "local")
    return os.path.realpath(name) if os.path.splitext(os.path.basename(name))[1] else name


def port_path(db: str | Path, name: str = PORT_FILE) -> str:
    """`<db>/<name>` (the port file by default); a db given as a URI keeps its file under
    ~/.cache/fanout/serve/, named by the URI's hash."""
    s = str(db)
    if "://" in s:
        import hashlib

        digest = hashlib.sha256(s.encode()).hexdigest()[:16]
        cache = os.environ.get("FANOUT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "fanout")
        return os.path.join(cache, "serve", f"{digest}.json" if name == PORT_FILE else f"{digest}{name}")
    return os.path.join(s, name)


def port_file(db: str | Path) -> Path:
    """port_path as a Path (the server side; the warm client stays off pathlib)."""
    from pathlib import Path

    return Path(port_path(db))


def ask_server(db: str | Path, request: dict[str, Any], config: str | None,
               timeout: float = 600.0) -> dict[str, Any] | None:
    """The warm server's answer to `request`, or None when no usable server runs for this db and config."""
    if os.environ.get(ENV_NO_SERVER, "") not in ("", "0"):
        return None
    try:
        with open(port_path(db), encoding="utf-8") as fh:
            info = json.load(fh)
    except (OSError, ValueError):
        return None
    if info.get("config") != config_key(config):
        _log().info("fanout serve runs config %s, not %s: searching in-process", info.get("config"),
                 config_key(config))
        return None
    body = json.dumps({"token": info.get("token"), "request": request}).encode()
    try:
        status, data = post(int(info["port"]), "/query", body, timeout)
    except (OSError, ValueError, KeyError) as e:
        _log().info("fanout serve at %s did not answer (%s): searching in-process", info.get("port"), e)
        return None
    if status == 400:
        raise UserError(data.get("error", "bad request"))
    if status != 200:
        _log().warning("fanout serve failed (%s): %s; searching in-process", status, data.get("error"))
        return None
    data["served_by"] = int(info["port"])
    return data


def post(port: int, path: str, body: bytes, timeout: float) -> tuple[int, dict[str, Any]]:
    """One HTTP/1.0 POST over a plain socket (http.client would import the email package: ~50 ms of the
    warm path's budget). The server closes the connection after its answer."""
    head = (f"POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # not create_connection: no DNS/idna codec
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
        s.sendall(head + body)
        chunks = []
        while block := s.recv(1 << 16):
            chunks.append(block)
    raw = b"".join(chunks)
    header, sep, payload = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("truncated HTTP answer")
    status = int(header.split(b" ", 2)[1])
    return status, json.loads(payload or b"{}")
