"""`fanout serve`: an HTTP server on 127.0.0.1 that keeps the Searchers, the lancedb handles and the embedder
warm, so `fanout query / search / vsearch` answer a repeated query in milliseconds, not seconds. It runs on
uvicorn (in this process, one worker, its h11 parser: the stack `fanout mcp --http` uses), so the backlog,
keep-alive and header parsing are a maintained server's; searches run in a worker thread, one at a time.

The server writes a port file `<db>/.fanout-serve.json` (mode 0600: port, pid, config, a random token that
every request must carry); the CLI reads it and posts its request there, and falls back to running the
pipeline in-process when there is no file, the server does not answer, or the server runs another config
(`FANOUT_NO_SERVER=1` forces in-process). Only the stdlib is imported on the client side.

The server trusts no client: a malformed request gets a 4xx JSON answer naming what is wrong, and the
`serve:` config bounds each connection's time (idle and whole-request timeouts: 408), their number (503), the
headers (431) and the body's size (413); the port file is written through `fanout.cli.common.write_private` (never
through a planted link).
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
ANSWER_HINT = "POST /query with a JSON body, or GET /health"


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
    """The service, plus a memory of answers to repeated requests and a check that drops stale handles when a
    collection is re-indexed or removed.

    Every request reads the index state of each collection it searches (the default one included): a digest of
    the collection's manifest as stored, which `fanout index` rewrites last, naming the table versions it
    completed (and `fanout collection remove` deletes). Remembered answers are keyed on those states, so a
    re-index, an optimize or a removal makes the next identical request miss; a collection whose state changed
    has its Searchers reopened and its remembered answers dropped. Read through the storage layer, so an
    object-store db (s3://...) works as a local folder does: one small read per collection and request.
    """

    def __init__(self, db: str, kb: Any, max_answers: int = 0):
        import secrets
        import threading
        from collections import OrderedDict

        self.db, self.kb = db, kb  # a fanout.api.KnowledgeBase: searches run one at a time under its lock
        self.token = secrets.token_hex(16)
        self.stamps: dict[str, str] = {}  # collection -> the index state its Searchers and answers come from
        # answers of repeated requests, keyed by the request and its collections' index states; least recently
        # used dropped first. Each entry: (the answer, the collections it searched)
        self.max_answers = max_answers
        self.answers: OrderedDict[str, tuple[dict[str, Any], tuple[str, ...]]] = OrderedDict()
        self._answers_lock = threading.Lock()
        self._stale: set[str] = set()  # collections whose Searchers must be reopened before the next search

    def state(self, name: str) -> str | None:
        """Collection `name`'s index state now (None: no manifest, e.g. removed); when it differs from the one
        seen before, its Searchers and remembered answers are dropped."""
        import hashlib

        from fanout.store import storage
        from fanout.store.db import Collection

        col = Collection(self.db, name, self.kb.cfg)  # checks the name; no I/O
        try:
            raw = storage.read_bytes(col.manifest_path, self.kb.cfg.storage)
        except (OSError, ValueError):  # FileNotFoundError included: no index (the search says so)
            state = None
        else:
            state = hashlib.blake2b(raw, digest_size=16).hexdigest()
        if self.stamps.get(name) != state:
            self._changed(name, state)
        return state

    def _changed(self, name: str, state: str | None) -> None:
        with self._answers_lock:
            known = name in self.stamps
            if state is None:
                self.stamps.pop(name, None)
            else:
                self.stamps[name] = state
            if known:  # re-indexed or removed since: forget its answers, reopen its tables before the next
                # search (not waiting here for one in progress)
                for key in [k for k, (_, names) in self.answers.items() if name in names]:
                    del self.answers[key]
                self._stale.add(name)

    def _reopen(self) -> None:
        """Drop the Searchers of collections re-indexed or removed since they were opened."""
        with self._answers_lock:
            stale, self._stale = self._stale, set()
        if stale:
            self.kb.forget(stale)

    def run(self, req: Any) -> dict[str, Any]:
        """The answer to one request: from memory, else searched."""
        hit, ticket = self.lookup(req)
        return hit if hit is not None else self.search(req, ticket)

    def lookup(self, req: Any) -> tuple[dict[str, Any] | None, Any]:
        """(the remembered answer or None, the ticket `search` needs): checks the request and reads the index
        states; never waits for a search in progress."""
        from fanout.api.service import check_request
        from fanout.cli.common import DEFAULT_COLLECTION

        check_request(req, self.kb.cfg.serve.max_results,  # before its collections name any file
                      self.kb.cfg.retrieve.max_sections, self.kb.cfg.serve.max_collections)
        names = tuple(req.get("collections") or [DEFAULT_COLLECTION])  # what SearchService.run searches
        states = [self.state(name) for name in names]
        if not self.max_answers or None in states:
            return None, None
        key = json.dumps([req, names, states], sort_keys=True, default=str)
        with self._answers_lock:
            hit = self.answers.get(key)
            if hit is not None:
                self.answers.move_to_end(key)
                return {**hit[0], "answered": "memory"}, None
        return None, (key, names, states)

    def search(self, req: Any, ticket: Any) -> dict[str, Any]:
        """Search (one at a time: the KnowledgeBase's lock) and remember the answer under `lookup`'s ticket."""
        self._reopen()
        resp = self.kb.answer(req)
        if ticket is not None and not resp.get("errors"):
            key, names, states = ticket
            with self._answers_lock:
                if all(self.stamps.get(n) == s for n, s in zip(names, states)):  # not re-indexed meanwhile
                    self.answers[key] = (resp, names)
                    while len(self.answers) > self.max_answers:
                        self.answers.popitem(last=False)
        return resp


def _json(data: dict[str, Any]) -> bytes:
    try:
        return json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800") echoed from the request
        return json.dumps(data).encode()


def _raw_answer(status: int, message: str) -> bytes:
    """A whole HTTP answer written past the parser (h11 sends none before a request has arrived)."""
    from http import HTTPStatus

    body = _json({"error": message})
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _refusal(reason: str, head: bytes, limits: Any) -> str:
    """h11's reason for refusing a request (`bad Content-Length`, ...) as a message naming what was sent."""
    import re

    if "Content-Length" in reason:
        given = re.findall(rb"(?im)^content-length:[ \t]*([^\r\n]*)", head)
        shown = ", ".join(repr(g.decode("latin-1")[:40]) for g in given[:3]) or "?"
        return f"Content-Length must be a whole number of bytes, sent once, got {shown}"
    if reason.startswith("illegal request line"):
        line = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
        return f"the request line {line.decode('latin-1')[:60]!r} is not `METHOD /path HTTP/1.x`; {ANSWER_HINT}"
    if reason == "Receive buffer too long":
        return (f"the request's headers are larger than {limits.max_header_kb} KiB (serve.max_header_kb); "
                "send fewer or shorter headers")
    return f"{reason}; {ANSWER_HINT}"


def _protocol(limits: Any) -> type:
    """uvicorn's h11 connection, plus what `serve:` promises on top of it: a connection over
    `serve.max_connections` is answered 503 at once; a request (headers and body) must arrive within
    `serve.request_timeout_s` and never stall for `serve.idle_timeout_s`, else 408 and close (a connection that
    sends nothing is closed silently after `idle_timeout_s`; between kept-alive requests uvicorn's keep-alive
    timeout closes it); h11's own refusals (a malformed request line or Content-Length, too large headers) come
    as a JSON 4xx naming what was sent, not uvicorn's plain-text 400."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    idle, whole = limits.idle_timeout_s, limits.request_timeout_s
    head_keep = 4096  # bytes of a request's start kept to name what a refused request sent

    class Parser(h11.Connection):
        """h11's parser, remembering why it refused a request (uvicorn drops the reason)."""

        refused: h11.RemoteProtocolError | None = None

        def next_event(self) -> Any:
            try:
                return super().next_event()
            except h11.RemoteProtocolError as e:
                self.refused = e
                raise

    class Protocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.conn = Parser(h11.SERVER, limits.max_header_kb * 1024)
            self.timer: Any = None
            self.began: float | None = None  # when the first byte of the request now arriving came
            self.last = 0.0  # when the last byte came
            self.head = b""  # the start of that request
            self.lingering = False  # answered and half-closed: what the client still sends is dropped

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.last = self.loop.time()
            if len(self.connections) > limits.max_connections:
                self.answer_and_close(503, f"fanout serve holds {limits.max_connections} connections "
                                           "(serve.max_connections); try again")
                return
            self.timer = self.loop.call_later(idle, self.expire)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.lingering:
                return
            now = self.last = self.loop.time()
            if self.conn.their_state is h11.IDLE:  # a request begins: the first, or the next one kept alive
                if self.began is None:
                    self.began, self.head = now, b""
                    if self.timer is None:
                        self.timer = self.loop.call_later(idle, self.expire)
                if len(self.head) < head_keep:
                    self.head += data[:head_keep - len(self.head)]
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self.began = None  # the whole request is here (or refused): the app has it now

        def arriving(self) -> bool:
            """Whether a request is on its way in: headers begun, or a body the app still waits for."""
            state = self.conn.their_state
            if self.began is None:
                return False
            if state is h11.IDLE:
                return True
            return state is h11.SEND_BODY and self.cycle is not None and not self.cycle.response_started

        def expire(self) -> None:
            self.timer = None
            if self.transport.is_closing():
                return
            if self.lingering:
                self.transport.close()
                return
            now = self.loop.time()
            if self.cycle is None and self.began is None:  # connected, and silent since
                if now - self.last >= idle:
                    self.transport.close()
                else:
                    self.timer = self.loop.call_later(self.last + idle - now, self.expire)
                return
            if not self.arriving():
                self.began = None
                return
            part = "headers" if self.conn.their_state is h11.IDLE else "body"
            if now - self.began >= whole:
                self.answer_and_close(408, f"the request's {part} did not arrive within {whole:g} s "
                                           f"(serve.request_timeout_s); send the whole {part} at once")
            elif now - self.last >= idle:
                self.answer_and_close(408, f"the request's {part} stalled for {idle:g} s "
                                           f"(serve.idle_timeout_s); send the whole {part} at once")
            else:
                self.timer = self.loop.call_later(min(self.last + idle, self.began + whole) - now, self.expire)

        def eof_received(self) -> bool | None:
            """The client shut its sending side: with a request half-sent (headers, or a body shorter than its
            Content-Length) it is answered 400 before the connection closes, not dropped."""
            if self.lingering or self.transport.is_closing() or not self.arriving():
                return super().eof_received()
            if self.conn.their_state is h11.IDLE:
                self.answer_and_close(400, "the client closed its side before the request's headers were whole; "
                                           "send the whole request")
            else:
                length = dict(self.headers).get(b"content-length", b"?").decode("latin-1")[:20]
                self.answer_and_close(400, f"the body ended before the {length} bytes its Content-Length "
                                           "announced (the client closed its side); send the whole body")
            return True  # the transport stays open to send the answer (answer_and_close ends it)

        def send_400_response(self, msg: str) -> None:
            e = self.conn.refused
            status = e.error_status_hint if e is not None and e.error_status_hint in (400, 431, 501) else 400
            self.answer_and_close(status, _refusal(str(e) if e is not None else msg, self.head, limits))

        def answer_and_close(self, status: int, message: str) -> None:
            """Answer, half-close, and close when the client does (or after `idle_timeout_s`): closing at once
            with its request unread would reset the connection and lose the answer."""
            self.transport.write(_raw_answer(status, message))
            if self.cycle is not None:  # the app's answer to the request (if it still sends one) is dropped, not
                self.cycle.disconnected = True  # written after this one (a traceback in the log each time)
            if not self.transport.can_write_eof():
                self.transport.close()
                return
            self.transport.write_eof()
            self.lingering = True
            self.transport.resume_reading()  # (if flow control paused it) to see the client's end
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_later(idle, self.expire)

    return Protocol


def _asgi(app: _App, limits: Any) -> Any:
    """The ASGI app: GET /health, POST /query {"token": ..., "request": {...}}. Every answer is JSON; a
    malformed request gets a 4xx naming what is wrong. The search runs in a worker thread (one at a time:
    SearchService.lock), so the event loop keeps accepting and answering other connections."""
    import asyncio
    import re
    import secrets

    from fanout.store import storage

    max_body = limits.max_body_kb * 1024
    max_head = limits.max_header_kb * 1024
    token = app.token.encode()
    local = not storage.is_remote(app.db)  # the index states are local files (else objects: read off the loop)
    searching = asyncio.Semaphore(1)  # searches wait here, not in worker threads that answers from memory need

    def answered(step: Any, *args: Any) -> tuple[int, bytes | None, Any]:
        """`step(*args)` (app.lookup or app.search) as (status, JSON body); (200, None, ticket) when lookup
        found no remembered answer and the request must be searched."""
        try:
            out = step(*args)
            if step == app.lookup:
                hit, ticket = out
                if hit is None:
                    return 200, None, ticket
                out = hit
            return 200, _json(out), None
        except (ValueError, FileNotFoundError) as e:  # what the user asked for is wrong: same as in-process
            return 400, _json({"error": str(e)}), None
        except Exception as e:  # noqa: BLE001 - a failure inside the pipeline: report it, keep serving
            _log().exception("query failed")
            return 500, _json({"error": f"{type(e).__name__}: {e}"}), None

    async def body_of(scope: dict, receive: Any) -> tuple[int, str] | bytes | None:
        """The request body; (status, error) when it is missing, malformed or too large; None when the client
        went away (timeouts are the connection's: Protocol.expire answers 408)."""
        headers = dict(scope["headers"])
        if b"transfer-encoding" in headers:
            return 411, "send the body with a Content-Length header, not Transfer-Encoding"
        raw = headers.get(b"content-length")
        if raw is None:
            return 411, "a Content-Length header is required"
        if not re.fullmatch(rb"[0-9]{1,15}", raw.strip()):
            return 400, f"Content-Length must be a whole number of bytes, got {raw.decode('latin-1')[:40]!r}"
        n = int(raw)
        if n == 0:
            return 400, 'the request body is empty; send {"token": ..., "request": {...}}'
        if n > max_body:
            return 413, f"the request body is {n} bytes; at most {max_body} (serve.max_body_kb) are read"
        chunks, more = [], True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None
            chunks.append(msg.get("body", b""))
            more = msg.get("more_body", False)
        body = b"".join(chunks)
        if len(body) < n:
            return 400, f"the body ended after {len(body)} of the {n} bytes Content-Length announced"
        return body

    async def answer(scope: dict, receive: Any) -> tuple[int, bytes, bool] | None:
        """(status, JSON body, close the connection after it), or None when the client went away."""
        headers = scope["headers"]
        if len(headers) > limits.max_headers or sum(len(k) + len(v) + 4 for k, v in headers) > max_head:
            return 431, _json({"error": f"the request has {len(headers)} headers; at most {limits.max_headers} "
                                        f"(serve.max_headers) of at most {limits.max_header_kb} KiB "
                                        "(serve.max_header_kb) are read"}), True
        method, path = scope["method"], scope["raw_path"] + (b"?" if scope["query_string"] else b"")
        if method == "GET":
            if path == b"/health":  # liveness only: nothing about the db without the token
                return 200, _json({"ok": True}), False
            return 404, _json({"error": "POST /query or GET /health"}), False
        if method != "POST":
            return 501, _json({"error": f"method {method[:20]!r} is not served; {ANSWER_HINT}"}), True
        if path != b"/query":
            return 404, _json({"error": "POST /query"}), True
        body = await body_of(scope, receive)
        if body is None:
            return None
        if isinstance(body, tuple):
            return body[0], _json({"error": body[1]}), True
        try:
            msg = json.loads(body)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            return 400, _json({"error": f"the request body is not JSON: {str(e)[:200]}"}), False
        if not isinstance(msg, dict):
            return 400, _json({"error": 'the request body must be a JSON object {"token": ..., "request": '
                                        f'{{...}}}}, got {type(msg).__name__}'}), False
        given = msg.get("token")
        given = given.encode("utf-8", "surrogatepass") if isinstance(given, str) else b""
        if not secrets.compare_digest(given, token):
            return 403, _json({"error": "wrong token: read it from the port file"}), False
        loop, request = asyncio.get_running_loop(), msg.get("request")
        if local:  # a small local read: answered here, a thread hop would cost more than the lookup
            status, data, ticket = answered(app.lookup, request)
        else:  # an object store's round trip must not hold the event loop
            status, data, ticket = await loop.run_in_executor(None, answered, app.lookup, request)
        if data is None:  # not remembered: search, one request at a time
            async with searching:
                status, data, _ = await loop.run_in_executor(None, answered, app.search, request, ticket)
        return status, data, False

    async def asgi(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan is off; nothing else is served
            return
        out = await answer(scope, receive)
        if out is None:
            return
        status, data, close = out
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
        if close:  # a body the app did not read must not be taken for the next request
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return asgi


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _listen(port: int, backlog: int) -> socket.socket:
    """The listening socket on 127.0.0.1 (bound here, so the port file can name a port 0 became)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart reuses a port in TIME_WAIT
        sock.bind(("127.0.0.1", port))
        sock.listen(backlog)  # connections made before the loop runs wait here
    except OSError as e:
        sock.close()
        raise UserError(f"fanout serve cannot listen on 127.0.0.1:{port} ({e.strerror or e}); give another "
                        "--port, or --port 0 for any free one") from None
    return sock


def _room_for(connections: int) -> None:
    """Raise the open-file limit so that `serve.max_connections` sockets fit beside the index's files."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    need = connections + 256  # the index's files, the models, the listening socket
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    new = need if hard == resource.RLIM_INFINITY else min(need, hard)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    if soft < need:
        _log().warning("the open-file limit is %d: fewer than serve.max_connections (%d) connections may be "
                       "accepted at once; raise it (ulimit -n) or lower serve.max_connections", soft, connections)


def _uvicorn(asgi: Any, limits: Any) -> Any:
    """uvicorn in this process: one worker, one event loop, its h11 parser with `_protocol`'s limits;
    backlog (`serve.backlog`), keep-alive and header size are uvicorn's settings."""
    import uvicorn

    config = uvicorn.Config(
        asgi, http=_protocol(limits), ws="none", lifespan="off", interface="asgi3", workers=1,
        backlog=limits.backlog, timeout_keep_alive=limits.idle_timeout_s,  # type: ignore[arg-type]
        h11_max_incomplete_event_size=limits.max_header_kb * 1024,
        log_config=None, log_level="error", access_log=False,  # the body (the token) is never logged anyway
        proxy_headers=False, server_header=False, date_header=False)
    return uvicorn.Server(config)


def watched_collection(args: Any) -> str | None:
    """The collection `--watch VAULT` keeps current (`-c NAME`, else the default one); None without --watch."""
    from fanout.cli.common import DEFAULT_COLLECTION

    if not getattr(args, "watch", None):
        return None
    names = list(getattr(args, "warm", None) or [])
    if len(names) > 1:
        raise UserError(f"--watch keeps one collection current, got -c {','.join(names)}; give -c with one name")
    return names[0] if names else DEFAULT_COLLECTION


def first_index(kb: Any, vault: str) -> None:
    """Index `vault` now when `kb`'s collection has no index yet (a server with `--watch` on a new db)."""
    from fanout.store import manifest

    if not manifest.exists(kb.db, kb.collection, kb.cfg.storage):
        print(f"fanout: no index of {kb.collection!r} yet: indexing {vault} first", file=sys.stderr, flush=True)
        print(kb.index(vault).text(), file=sys.stderr, flush=True)


def serve(args: Any) -> int:
    """`fanout serve --db DB [--port N]`: serve until Ctrl-C / SIGTERM; removes its port file on exit."""
    import signal

    from fanout.api import KnowledgeBase
    from fanout.cli.common import DEFAULT_COLLECTION, config_from_args, write_private

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be 0 (any free port) to 65535, got {args.port}")
    cfg = config_from_args(args)
    pf = port_file(args.db)
    watched = watched_collection(args)
    with KnowledgeBase(args.db, watched or DEFAULT_COLLECTION, cfg) as kb:
        if watched:  # (with no index yet, the first round runs before the server answers)
            first_index(kb, args.watch)
        kb.warm(args.warm or ())  # a missing index or a model mismatch fails here, not at the first request
        app = _App(str(args.db), kb, cfg.cache.serve_answers)
        for name in args.warm or []:  # a re-index after this point reopens the collection's tables
            app.state(name)
        watcher = None
        if watched:  # each round that publishes a new index version drops that collection's remembered answers
            from fanout.cli.watch import round_printer

            watcher = kb.watch(args.watch, on_round=round_printer(sys.stderr, lambda r: app.state(watched)))
        _room_for(cfg.serve.max_connections)
        server = _uvicorn(_asgi(app, cfg.serve), cfg.serve)
        sock = _listen(args.port, cfg.serve.backlog)
        port = sock.getsockname()[1]
        try:
            pf.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_private(str(pf), json.dumps({"port": port, "pid": os.getpid(), "token": app.token,
                                               "config": config_key(args.config), "db": str(args.db)}))
            signal.signal(signal.SIGTERM, _interrupt)  # uvicorn stops gracefully, then raises it again here
            print(f"fanout serve: {args.db} on http://127.0.0.1:{port} (port file {pf}); "
                  "fanout query/search/vsearch use it now. Ctrl-C stops.", file=sys.stderr, flush=True)
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
        finally:
            sock.close()
            if watcher is not None:
                watcher.stop()
            with contextlib.suppress(OSError, ValueError):
                if json.loads(pf.read_text(encoding="utf-8")).get("pid") == os.getpid():
                    pf.unlink()
    return 0
