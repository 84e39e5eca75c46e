"""`fanout serve`'s ASGI app: GET /health and POST /query (a token, then one search request), every answer
JSON, a malformed request a 4xx naming what is wrong; and `App`, the service behind it, which remembers
answers to repeated requests and drops stale handles when a collection is re-indexed or removed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fanout.api.requests import SearchRequest, parse_search_request
from fanout.serve.client import ANSWER_HINT

if TYPE_CHECKING:
    from fanout.api import KnowledgeBase
    from fanout.api.types import SearchResponse
    from fanout.config import ServeConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ticket:
    """What `App.search` needs after `App.lookup` found nothing remembered: the parsed request and, when the
    answer may be remembered, its key and the collections' index states at lookup."""

    request: SearchRequest
    key: str | None = None
    names: tuple[str, ...] = ()
    states: tuple[str | None, ...] = ()


class App:
    """The service, plus a memory of answers to repeated requests and a check that drops stale handles when a
    collection is re-indexed or removed.

    Every request reads the index state of each collection it searches (the default one included): a digest of
    the collection's manifest as stored, which `fanout index` rewrites last, naming the table versions it
    completed (and `fanout collection remove` deletes). Remembered answers are keyed on those states, so a
    re-index, an optimize or a removal makes the next identical request miss; a collection whose state changed
    has its Searchers reopened and its remembered answers dropped. Read through the storage layer, so an
    object-store db (s3://...) works as a local folder does: one small read per collection and request.
    """

    def __init__(self, db: str, kb: KnowledgeBase, max_answers: int = 0):
        import secrets
        import threading
        from collections import OrderedDict

        self.db, self.kb = db, kb  # a fanout.api.KnowledgeBase: searches run one at a time under its lock
        self.token = secrets.token_hex(16)
        self.stamps: dict[str, str] = {}  # collection -> the index state its Searchers and answers come from
        # answers of repeated requests, keyed by the request and its collections' index states; least recently
        # used dropped first. Each entry: (the answer, the collections it searched)
        self.max_answers = max_answers
        self.answers: OrderedDict[str, tuple[SearchResponse, tuple[str, ...]]] = OrderedDict()
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

    def run(self, req: object) -> SearchResponse:
        """The answer to one request (the JSON body's `request`): from memory, else searched."""
        hit, ticket = self.lookup(req)
        if hit is not None:
            return hit
        assert ticket is not None  # lookup gives one or the other
        return self.search(ticket)

    def lookup(self, req: object) -> tuple[SearchResponse | None, Ticket | None]:
        """(the remembered answer, None) or (None, the ticket `search` needs): parses the request (RequestError,
        before its collections name any file) and reads the index states; never waits for a search."""
        from fanout.defaults import DEFAULT_COLLECTION

        parsed = parse_search_request(req, self.kb.cfg.serve.max_results, self.kb.cfg.retrieve.max_sections,
                                      self.kb.cfg.serve.max_collections)
        names = parsed.collections or (DEFAULT_COLLECTION,)  # what SearchService.run searches
        states = tuple(self.state(name) for name in names)
        if not self.max_answers or None in states:
            return None, Ticket(parsed)
        key = json.dumps([parsed.to_json(), names, states], sort_keys=True, default=str)
        with self._answers_lock:
            hit = self.answers.get(key)
            if hit is not None:
                self.answers.move_to_end(key)
                return {**hit[0], "answered": "memory"}, None
        return None, Ticket(parsed, key, names, states)

    def search(self, ticket: Ticket) -> SearchResponse:
        """Search (one at a time: the KnowledgeBase's lock) and remember the answer under `lookup`'s ticket."""
        self._reopen()
        # (states read while a collection still serves the version before its manifest's, its round's new one
        # being made ready: fanout/api/next_version.py, are not what the answer comes from: not remembered)
        held = ticket.key is not None and self.kb.serves_older(ticket.names)
        resp = self.kb.answer(ticket.request)
        if ticket.key is not None and not held and not resp.get("errors"):
            key, names, states = ticket.key, ticket.names, ticket.states
            with self._answers_lock:
                if all(self.stamps.get(n) == s for n, s in zip(names, states)):  # not re-indexed meanwhile
                    self.answers[key] = (resp, names)
                    while len(self.answers) > self.max_answers:
                        self.answers.popitem(last=False)
        return resp


def json_bytes(data: Mapping[str, Any]) -> bytes:
    try:
        return json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800") echoed from the request
        return json.dumps(data).encode()


def asgi_app(app: App, limits: ServeConfig) -> Any:
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
            return 200, json_bytes(out), None
        except (ValueError, FileNotFoundError) as e:  # what the user asked for is wrong: same as in-process
            return 400, json_bytes({"error": str(e)}), None
        except Exception as e:
            log.exception("query failed")
            return 500, json_bytes({"error": f"{type(e).__name__}: {e}"}), None

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
            return 431, json_bytes({"error": f"the request has {len(headers)} headers; at most {limits.max_headers} "
                                        f"(serve.max_headers) of at most {limits.max_header_kb} KiB "
                                        "(serve.max_header_kb) are read"}), True
        method, path = scope["method"], scope["raw_path"] + (b"?" if scope["query_string"] else b"")
        if method == "GET":
            if path == b"/health":  # liveness only: nothing about the db without the token
                return 200, json_bytes({"ok": True}), False
            return 404, json_bytes({"error": "POST /query or GET /health"}), False
        if method != "POST":
            return 501, json_bytes({"error": f"method {method[:20]!r} is not served; {ANSWER_HINT}"}), True
        if path != b"/query":
            return 404, json_bytes({"error": "POST /query"}), True
        body = await body_of(scope, receive)
        if body is None:
            return None
        if isinstance(body, tuple):
            return body[0], json_bytes({"error": body[1]}), True
        try:
            msg = json.loads(body)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            return 400, json_bytes({"error": f"the request body is not JSON: {str(e)[:200]}"}), False
        if not isinstance(msg, dict):
            return 400, json_bytes({"error": 'the request body must be a JSON object {"token": ..., "request": '
                                        f'{{...}}}}, got {type(msg).__name__}'}), False
        given = msg.get("token")
        given = given.encode("utf-8", "surrogatepass") if isinstance(given, str) else b""
        if not secrets.compare_digest(given, token):
            return 403, json_bytes({"error": "wrong token: read it from the port file"}), False
        loop, request = asyncio.get_running_loop(), msg.get("request")
        if local:  # a small local read: answered here, a thread hop would cost more than the lookup
            status, data, ticket = answered(app.lookup, request)
        else:  # an object store's round trip must not hold the event loop
            status, data, ticket = await loop.run_in_executor(None, answered, app.lookup, request)
        if data is None:  # not remembered: search, one request at a time
            async with searching:
                status, data, _ = await loop.run_in_executor(None, answered, app.search, ticket)
            assert data is not None  # only lookup answers None (nothing remembered); search always has a body
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
