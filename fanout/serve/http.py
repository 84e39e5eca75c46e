"""`fanout serve`: a small HTTP server on 127.0.0.1 that keeps the Searchers, the lancedb handles and the
embedder warm, so `fanout query / search / vsearch` answer a repeated query in milliseconds, not seconds.

The server writes a port file `<db>/.fanout-serve.json` (mode 0600: port, pid, config, a random token that
every request must carry); the CLI reads it and posts its request there, and falls back to running the
pipeline in-process when there is no file, the server does not answer, or the server runs another config
(`FANOUT_NO_SERVER=1` forces in-process). Only the stdlib is imported on the client side.

The server trusts no client: a malformed request gets a 4xx JSON answer naming what is wrong, and the
`serve:` config bounds each connection's time (idle and whole-request timeouts), their number and the body's
size; the port file is written through `fanout.cli.common.write_private` (never through a planted link).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys

TYPE_CHECKING = False  # typing itself costs the warm client ~5 ms of import, pathlib ~8 ms (urllib, ipaddress)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

from fanout.cli.common import ENV_NO_SERVER
from fanout.errors import UserError


def _log() -> Any:
    """This module's logger, imported on first use: the warm client's path never logs (~20 ms of imports)."""
    import logging

    return logging.getLogger(__name__)
PORT_FILE = ".fanout-serve.json"


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
        status, data = _post(int(info["port"]), "/query", body, timeout)
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


def _handler(app: Any, limits: Any) -> type:
    """The request handler class bound to one app and the `serve:` limits (http.server is imported only by
    the server). Every answer is JSON; a malformed request gets a 4xx naming what is wrong."""
    import io
    import re
    import secrets
    import time
    from http.server import BaseHTTPRequestHandler

    max_body = limits.max_body_kb * 1024

    class DeadlineIO(socket.SocketIO):
        """The connection's reads: each waits at most `idle_timeout_s`, all of them end by the deadline."""

        def __init__(self, sock: socket.socket, deadline: float):
            super().__init__(sock, "rb")
            self.deadline = deadline

        def readinto(self, b: Any) -> int | None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the request did not arrive within {limits.request_timeout_s} s")
            self._sock.settimeout(min(limits.idle_timeout_s, left))
            return super().readinto(b)

    class Handler(BaseHTTPRequestHandler):
        server_version = "fanout-serve"

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # replaced by one that enforces the request's deadline
            deadline = time.monotonic() + limits.request_timeout_s
            self.rfile = io.BufferedReader(DeadlineIO(self.connection, deadline))

        def log_message(self, fmt: str, *args: Any) -> None:  # http.server prints to stderr otherwise
            _log().debug("%s " + fmt, self.address_string(), *args)

        def _send(self, code: int, data: dict[str, Any]) -> None:
            self.connection.settimeout(limits.idle_timeout_s)  # a client that does not read is dropped
            try:
                body = json.dumps(data, ensure_ascii=False).encode()
            except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800") echoed from the request
                body = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            """http.server's own rejections (bad request line, too many headers, unknown method) as JSON."""
            from http import HTTPStatus

            self.close_connection = True
            self.request_version = "HTTP/1.0"  # a status line even for a request line without a version
            phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else "error"
            self._send(code, {"error": f"{message or phrase}; POST /query with a JSON body, or GET /health"})

        def do_GET(self) -> None:
            if self.path == "/health":  # liveness only: nothing about the db without the token
                self._send(200, {"ok": True})
            else:
                self._send(404, {"error": "POST /query or GET /health"})

        def _body(self) -> tuple[int, str] | bytes:
            """The request body, or (status, error) when it is missing, malformed, too large or too slow."""
            if self.headers.get("Transfer-Encoding"):
                return 411, "send the body with a Content-Length header, not Transfer-Encoding"
            raw = self.headers.get("Content-Length")
            if raw is None:
                return 411, "a Content-Length header is required"
            if not re.fullmatch(r"[0-9]{1,15}", raw.strip()):
                return 400, f"Content-Length must be a whole number of bytes, got {raw[:40]!r}"
            n = int(raw)
            if n == 0:
                return 400, 'the request body is empty; send {"token": ..., "request": {...}}'
            if n > max_body:
                return 413, f"the request body is {n} bytes; at most {max_body} (serve.max_body_kb) are read"
            try:
                body = self.rfile.read(n)
            except TimeoutError as e:
                return 408, f"{e}; send the whole body at once"
            if len(body) < n:
                return 400, f"the body ended after {len(body)} of the {n} bytes Content-Length announced"
            return body

        def do_POST(self) -> None:
            if self.path != "/query":
                return self._send(404, {"error": "POST /query"})
            body = self._body()
            if isinstance(body, tuple):
                self.close_connection = True
                return self._send(body[0], {"error": body[1]})
            try:
                msg = json.loads(body)
            except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
                return self._send(400, {"error": f"the request body is not JSON: {str(e)[:200]}"})
            if not isinstance(msg, dict):
                return self._send(400, {"error": 'the request body must be a JSON object {"token": ..., '
                                                 f'"request": {{...}}}}, got {type(msg).__name__}'})
            token = msg.get("token")
            given = token.encode("utf-8", "surrogatepass") if isinstance(token, str) else b""
            if not secrets.compare_digest(given, app.token.encode()):
                return self._send(403, {"error": "wrong token: read it from the port file"})
            try:
                self._send(200, app.run(msg.get("request")))
            except (ValueError, FileNotFoundError) as e:  # what the user asked for is wrong: same as in-process
                self._send(400, {"error": str(e)})
            except Exception as e:  # noqa: BLE001 - a failure inside the pipeline: report it, keep serving
                _log().exception("query failed")
                self._send(500, {"error": f"{type(e).__name__}: {e}"})

    return Handler


def _server(address: tuple[str, int], handler: type, max_connections: int) -> Any:
    """A threading HTTP server that holds at most `max_connections` connections; one more gets 503."""
    import threading
    from http.server import ThreadingHTTPServer

    msg = json.dumps({"error": f"fanout serve holds {max_connections} connections (serve.max_connections); "
                               "try again"}).encode()
    busy = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg))

    class Server(ThreadingHTTPServer):
        slots = threading.BoundedSemaphore(max_connections)

        def process_request(self, request: Any, client_address: Any) -> None:
            if not self.slots.acquire(blocking=False):
                with contextlib.suppress(OSError):
                    request.settimeout(1.0)
                    request.sendall(busy)
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client_address)
            except BaseException:
                self.slots.release()
                raise

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self.slots.release()

    return Server(address, handler)


def _post(port: int, path: str, body: bytes, timeout: float) -> tuple[int, dict[str, Any]]:
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


class _App:
    """The service plus a check that drops stale handles when a collection is re-indexed."""

    def __init__(self, db: str, service: Any, max_answers: int = 0):
        import secrets
        import threading
        from collections import OrderedDict

        self.db, self.service = db, service
        self.token = secrets.token_hex(16)
        self.stamps: dict[str, float] = {}
        # answers of repeated requests, keyed by the request and its collections' manifest stamps (a re-index
        # rewrites the manifest, so a stale answer is never served); least recently used dropped first
        self.max_answers = max_answers
        self.answers: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._answers_lock = threading.Lock()

    def run(self, req: Any) -> dict[str, Any]:
        from fanout.api.service import check_request

        check_request(req, self.service.cfg.serve.max_results)  # before its collections name any file
        stamps = []
        for name in req.get("collections") or []:
            mf = os.path.join(self.db, f"{name}.manifest.json")
            stamp = None
            with contextlib.suppress(OSError):
                stamp = os.stat(mf).st_mtime_ns
                if self.stamps.setdefault(name, stamp) != stamp:  # re-indexed since: reopen its tables
                    self.stamps[name] = stamp
                    with self.service.lock:
                        for key in [k for k in self.service._searchers if k[0] == name]:
                            del self.service._searchers[key]
            stamps.append(stamp)
        if not self.max_answers:
            return self.service.run(req)
        key = json.dumps([req, stamps], sort_keys=True, default=str)
        with self._answers_lock:
            hit = self.answers.get(key)
            if hit is not None:
                self.answers.move_to_end(key)
                return {**hit, "answered": "memory"}
        resp = self.service.run(req)
        if not resp.get("errors"):
            with self._answers_lock:
                self.answers[key] = resp
                while len(self.answers) > self.max_answers:
                    self.answers.popitem(last=False)
        return resp


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def serve(args: Any) -> int:
    """`fanout serve --db DB [--port N]`: serve until Ctrl-C / SIGTERM; removes its port file on exit."""
    import signal

    from fanout.api.service import SearchService
    from fanout.cli.common import config_from_args, write_private
    from fanout.exec.engines import make_runner

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be 0 (any free port) to 65535, got {args.port}")
    cfg = config_from_args(args)
    pf = port_file(args.db)
    with make_runner(cfg, n_rows=1) as runner:
        service = SearchService(args.db, cfg, runner)
        for name in args.warm or []:
            service.searcher(name, "query")  # fails early on a missing index or a model mismatch
        runner.preload("embedder")
        app = _App(str(args.db), service, cfg.cache.serve_answers)
        for name in args.warm or []:  # a re-index after this point reopens the collection's tables
            with contextlib.suppress(OSError):
                app.stamps[name] = os.stat(os.path.join(str(args.db), f"{name}.manifest.json")).st_mtime_ns
        httpd = _server(("127.0.0.1", args.port), _handler(app, cfg.serve), cfg.serve.max_connections)
        port = httpd.server_address[1]
        pf.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(str(pf), json.dumps({"port": port, "pid": os.getpid(), "token": app.token,
                                           "config": config_key(args.config), "db": str(args.db)}))
        signal.signal(signal.SIGTERM, _interrupt)
        print(f"fanout serve: {args.db} on http://127.0.0.1:{port} (port file {pf}); "
              "fanout query/search/vsearch use it now. Ctrl-C stops.", file=sys.stderr, flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            httpd.server_close()
            with contextlib.suppress(OSError, ValueError):
                if json.loads(pf.read_text(encoding="utf-8")).get("pid") == os.getpid():
                    pf.unlink()
    return 0
