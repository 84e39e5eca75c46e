"""`fanout serve`: an HTTP server on 127.0.0.1 that keeps the Searchers, the lancedb handles and the embedder
warm, so `fanout query / search / vsearch` answer a repeated query in milliseconds, not seconds. It runs on
uvicorn (in this process, one worker, its h11 parser: the stack `fanout mcp --http` uses), so the backlog,
keep-alive and header parsing are a maintained server's; searches run in a worker thread, one at a time.

The modules of the server: this one starts it (the socket, the port file, uvicorn, `--watch`);
fanout/serve/app.py holds the ASGI app and the answer memory; fanout/serve/h11_protocol.py what `serve:` adds
to uvicorn's connection; fanout/serve/client.py the CLI's side (the port file, one request).

The server trusts no client: a malformed request gets a 4xx JSON answer naming what is wrong, and the
`serve:` config bounds each connection's time (idle and whole-request timeouts: 408), their number (503), the
headers (431) and the body's size (413); the port file is written through `fanout.io.private_files.write_private` (never
through a planted link).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from fanout.errors import UserError
from fanout.serve.client import config_key, port_file

if TYPE_CHECKING:
    import argparse

    from fanout.api import KnowledgeBase

log = logging.getLogger(__name__)


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
        log.warning("the open-file limit is %d: fewer than serve.max_connections (%d) connections may be "
                       "accepted at once; raise it (ulimit -n) or lower serve.max_connections", soft, connections)


def _uvicorn(asgi: Any, limits: Any) -> Any:
    """uvicorn in this process: one worker, one event loop, its h11 parser with `protocol`'s limits;
    backlog (`serve.backlog`), keep-alive and header size are uvicorn's settings."""
    import uvicorn

    from fanout.serve.h11_protocol import protocol

    config = uvicorn.Config(
        asgi, http=protocol(limits), ws="none", lifespan="off", interface="asgi3", workers=1,
        backlog=limits.backlog, timeout_keep_alive=limits.idle_timeout_s,
        h11_max_incomplete_event_size=limits.max_header_kb * 1024,
        log_config=None, log_level="error", access_log=False,  # the body (the token) is never logged anyway
        proxy_headers=False, server_header=False, date_header=False)
    return uvicorn.Server(config)


def watched_collection(args: argparse.Namespace) -> str | None:
    """The collection `--watch VAULT` keeps current (`-c NAME`, else the default one); None without --watch."""
    from fanout.defaults import DEFAULT_COLLECTION

    if not getattr(args, "watch", None):
        return None
    names = list(getattr(args, "warm", None) or [])
    if len(names) > 1:
        raise UserError(f"--watch keeps one collection current, got -c {','.join(names)}; give -c with one name")
    return names[0] if names else DEFAULT_COLLECTION


def first_index(kb: KnowledgeBase, vault: str) -> None:
    """Index `vault` now when `kb`'s collection has no index yet (a server with `--watch` on a new db)."""
    from fanout.store import manifest

    if not manifest.exists(kb.db, kb.collection, kb.cfg.storage):
        print(f"fanout: no index of {kb.collection!r} yet: indexing {vault} first", file=sys.stderr, flush=True)
        print(kb.index(vault).text(), file=sys.stderr, flush=True)


def serve(args: argparse.Namespace) -> int:
    """`fanout serve --db DB [--port N]`: serve until Ctrl-C / SIGTERM; removes its port file on exit."""
    import signal

    from fanout.api import KnowledgeBase
    from fanout.cli.startup import config_from_args
    from fanout.defaults import DEFAULT_COLLECTION
    from fanout.io.private_files import write_private
    from fanout.serve.app import App, asgi_app

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be 0 (any free port) to 65535, got {args.port}")
    cfg = config_from_args(args)
    pf = port_file(args.db)
    watched = watched_collection(args)
    with KnowledgeBase(args.db, watched or DEFAULT_COLLECTION, cfg) as kb:
        if watched:  # (with no index yet, the first round runs before the server answers)
            first_index(kb, args.watch)
        kb.warm(args.warm or ())  # a missing index or a model mismatch fails here, not at the first request
        app = App(str(args.db), kb, cfg.cache.serve_answers)
        for name in args.warm or []:  # a re-index after this point reopens the collection's tables
            app.state(name)
        watcher = None
        if watched:  # each round that publishes a new index version drops that collection's remembered answers
            from fanout.cli.index_watch import round_printer

            watcher = kb.watch(args.watch, on_round=round_printer(sys.stderr, lambda r: app.state(watched)))
        _room_for(cfg.serve.max_connections)
        server = _uvicorn(asgi_app(app, cfg.serve), cfg.serve)
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
