"""`fanout mcp`: the tools `search`, `get` and `status` over MCP (stdio, or streamable HTTP on 127.0.0.1).

The agent calling `search` is the query expander: it fills the seed's fields `short_query` (full text only),
`rephrased_query` and `expected_answer` (vectors only), or qmd's `searches`; without them the query is
expanded locally (or not) per config. One Runner lives as long as the server, so models load once; tool calls
run in a worker thread, one search at a time (a llama.cpp model is not thread-safe), so the event loop stays
free. The field descriptions name the knowledge base's languages, counted in the index; only language codes
fanout knows reach them (a note's `lang:` is text its author wrote). Over HTTP every request must carry
`Authorization: Bearer <token>` (the token file is created 0600 next to the db on first use).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp import types
from mcp.server import Server
from mcp.server.stdio import stdio_server

from fanout.agent_fields import FIELD_DESC as AGENT_FIELD_DESC
from fanout.agent_fields import known_languages, language_code, language_line
from fanout.api import KnowledgeBase
from fanout.api.catalog import count_languages
from fanout.api.catalog import status as collection_status
from fanout.api.notes import headings_of, locate, note_lines, read_note, read_ref
from fanout.api.requests import parse_tool_search
from fanout.config import Config
from fanout.config.vocab import MAX_SEARCHES, SEARCH_TYPES
from fanout.errors import NoteError, RequestError, ToolArgError, UserError
from fanout.exec.runner import Runner
from fanout.filters import KINDS as FILTER_KINDS
from fanout.pipelines.clean_fields import collection_titles
from fanout.pipelines.clean_fields import hints as field_hints
from fanout.pipelines.parse_queries import RowError, parse_row
from fanout.pipelines.search import SearchOptions

if TYPE_CHECKING:
    import argparse

log = logging.getLogger(__name__)

MAX_LIMIT = 50  # pages one search may return
MAX_NOTE_CHARS = 40_000  # `get` cuts a longer note and lists its headings instead
SEARCH_FIELDS = ("query", "short_query", "rephrased_query", "expected_answer", "intent", "searches")
TOKEN_FILE = ".fanout-mcp-token"  # next to the db: the bearer token `fanout mcp --http` requires
ENV_TOKEN = "FANOUT_MCP_TOKEN"  # the token itself, instead of a token file
TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")  # what a token may be (it travels in a header)

SEARCH_DESC = ("Search the notes: full text and vectors, fused by reciprocal rank. You are the query "
               "expander: besides `query`, fill `short_query`, `rephrased_query` and `expected_answer`; each "
               "finds pages the others miss. Returns pages (path, title, heading, snippet, score; higher is "
               "better), and `hints` when a field looks weak; read a page with `get`. {lang}")
FIELD_DESC = {
    **AGENT_FIELD_DESC,  # query, short_query, rephrased_query, expected_answer: shared with the expander
    "intent": "Optional: what the user is trying to do, when the question alone is ambiguous. Context for "
              "the local expander and reranker; not searched by itself.",
    "searches": f"Optional, qmd style, with or instead of the fields above: up to {MAX_SEARCHES} typed "
                "searches. lex = keywords (full text), vec = a question (meaning), hyde = an answer-like "
                "passage (meaning).",
    "limit": f"Pages to return (default 10, at most {MAX_LIMIT}).",
    "filter": "Optional: only notes that match all of these. folder (a vault folder, e.g. \"Plugins\"), path (a "
              "path prefix), tag (with or without #; a parent tag matches nested ones), property (front matter "
              "`key=value`, or `key` for any value), lang (a language code); each a string or a list of "
              "alternatives. {lang}",
    "sections": "Optional: also return each page's N best sections (heading, file lines, score, snippet, ref), "
                "for long pages whose answer sits in a later section (at most {max_sections}).",
    "rerank": "Rescore the top candidates with the local reranker model: seconds slower. "
              "Default here: {rerank}.",
}
GET_DESC = ("Read a note, or one section of it, by its path relative to the vault (as `search` returns it). "
            "Returns the markdown without front matter.")
GET_FIELDS = {
    "path": "The note's path relative to the vault, as `search` returns it, e.g. \"Folder/Note.md\" (a note's "
            "title or alias works too), or a section's `ref` from `search` with `sections` "
            "(\"Folder/Note.md:40-52\": exactly those file lines; \"Folder/Note.md#Setup > Sync\": that section).",
    "heading": "Optional: one section's heading as `search` returns it (\"Setup > Sync\") or just its last "
               "part; returns that section with its subsections.",
}
STATUS_DESC = "The index behind `search`: collection, vault, notes, chunks, languages, models, index time."
INSTRUCTIONS = """Searches a markdown knowledge base ({notes} notes). For every question call `search` with \
`query` and fill the other fields yourself (you are the query expander):
- short_query: the feature's or setting's name as a help page title says it (one to three words);
- rephrased_query: the question in other words;
- expected_answer: one or two sentences that could stand in the note, written as documentation.
{lang} Then read the best page with `get` (its path, optionally one heading)."""


class FanoutTools:
    """The tools as plain synchronous methods on one collection (the MCP layer only dispatches to them)."""

    def __init__(self, db_dir: str | Path, collection: str, cfg: Config, runner: Runner):
        self.cfg, self.runner = cfg, runner
        # the API's KnowledgeBase on the server's runner: its Searcher (shared with any other face's request on
        # it) and its lock
        self.kb = KnowledgeBase.attach(db_dir, collection, cfg, runner)
        self.searcher = self.kb.service.searcher(collection, "query")
        self.col = self.searcher.col
        self.lock = self.kb.lock  # one request at a time: llama.cpp models are not thread-safe, and
        # each request reads one pinned index version (Searcher.refresh)
        self.vault: Path | None = None  # None: `get` refuses (never the cwd)
        self.refresh()
        self.langs = self.col.memo("languages", lambda: known_languages(count_languages(self.col)))

    def refresh(self) -> None:
        """Pin the index version this request reads (a re-index since the last request becomes visible)."""
        self.searcher.refresh()
        vault = self.col.require().get("vault")
        self.vault = Path(vault).resolve() if vault else None

    def warm(self) -> None:
        """Load the embedder before the first search needs it (a runner with nothing to load ahead skips it)."""
        with self.lock:
            self.runner.preload("embedder")

    # -- search ---------------------------------------------------------------------------------------
    def search(self, args: dict[str, Any]) -> dict[str, Any]:
        try:  # the arguments as a SearchRequest (the edge's one parse), its row through the batch row parser
            req = parse_tool_search(args, MAX_LIMIT, self.cfg.retrieve.max_sections)
            row = {**req.row(), **({"filter": req.filter} if req.filter is not None else {})}
            parse_row(row)  # the batch parser's checks and messages, before the lock
        except RequestError as e:
            raise ToolArgError(str(e), field=e.field) from None
        except RowError as e:
            msg = str(e)
            raise ToolArgError(msg if f"`{e.field}`" in msg else f"`{e.field}`: {msg}", field=e.field) from None
        t = time.perf_counter()
        with self.kb.searching():  # the lock, and the version the KnowledgeBase's searches serve (held in a round)
            searcher = self.kb.service.searcher(self.kb.collection, "query")  # (a round's swap replaces it)
            out = searcher.search([row], SearchOptions(n=req.n, rerank=req.rerank, sections=req.sections))
        log.info("search %.0f ms %s", (time.perf_counter() - t) * 1000, out.timings)
        if out.errors.num_rows:
            bad = out.errors.to_pylist()[0]
            raise ToolArgError(f"`{bad['field']}`: {bad['error']}", field=bad["field"])
        keys = ("path", "title", "heading", "snippet", "score")
        results = [{k: (round(r[k], 3) if k == "score" else r[k]) for k in keys}
                   | ({"sections": r["sections"] or []} if req.sections else {}) for r in out.results.to_pylist()]
        data: dict[str, Any] = {"results": results}
        examples = list(dict.fromkeys(r["title"] for r in results if r["title"]))[:3]
        if weak := field_hints(row, collection_titles(self.col), examples):  # fields that look weak
            data["hints"] = weak
        if not results:
            data["hint"] = ("no page matched; try the feature's name in short_query or a statement in "
                            "expected_answer")
        return data

    # -- get ------------------------------------------------------------------------------------------
    def resolve(self, rel: Any, docs: Callable[[], list[dict]] | None = None) -> Path:
        """A note path, title or alias -> the file, confined to the vault (no `..`, absolute paths or
        escaping symlinks). `docs`: the documents' loader to reuse (one read for every reading of a ref)."""
        return locate(self.vault, rel, docs or self.docs(), "`path`")

    def docs(self) -> Callable[[], list[dict]]:
        """A loader of the pinned documents (path, title, aliases), read once on its first call."""
        rows: list[dict] = []

        def load() -> list[dict]:
            if not rows:
                t = self.col.table(self.col.documents_name).search().select(["path", "title", "aliases"])
                rows.extend(t.limit(None).to_arrow().to_pylist())
            return rows
        return load

    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        _known(args, ("path", "heading"), "get")
        path, head, first, last = args.get("path"), args.get("heading"), None, None

        def read(target: Path) -> dict[str, Any]:
            return read_note(self.vault, target, limits=self.cfg.index)  # index.max_note_mb, as fanout get

        with self.lock:  # one pinned index version per request
            self.refresh()
            if isinstance(path, str) and head is None:  # a path, or a section's `ref` from search (sections=N):
                # "Folder/Note.md:40-52" reads exactly those file lines, "Note.md#Heading > Sub" that section
                docs = self.docs()
                note, r = read_ref(path, lambda name: self.resolve(name, docs), read)
                head, first, last = r.heading, r.line_from, r.line_to
            else:
                note = read(self.resolve(path))
        heading, _, lines = note_lines(note, head, first, last)
        text = "\n".join(lines).strip()
        data = {"path": note["path"], "title": note["title"], "heading": heading,
                "lang": language_code(note["lang"]), "text": text}
        if len(text) > MAX_NOTE_CHARS:
            data["text"] = text[:MAX_NOTE_CHARS]
            data["truncated"] = (f"cut at {MAX_NOTE_CHARS} of {len(text)} characters; get one `heading` of "
                                 f"{headings_of(note)[:50]}")
        return data

    # -- status ---------------------------------------------------------------------------------------
    def status(self, args: dict[str, Any]) -> dict[str, Any]:
        _known(args, (), "status")
        with self.lock:  # one pinned index version per request
            self.refresh()
            st = collection_status(self.col, self.cfg)
            return {**st, "languages": known_languages(st["languages"]), "vault": str(self.vault)}


def _known(args: dict[str, Any], allowed: tuple[str, ...], tool: str) -> None:
    extra = sorted(set(args) - set(allowed))
    if extra:
        raise ToolArgError(f"unknown argument `{extra[0]}` for {tool}; allowed: {list(allowed)}")


def _schema(props: dict[str, dict], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def tool_list(tools: FanoutTools) -> list[types.Tool]:
    """The three tools, their descriptions carrying the knowledge base's languages."""
    lang = language_line(tools.langs)
    d = {k: v.format(lang=lang, rerank="on" if tools.cfg.rerank.enabled else "off",
                     max_sections=tools.cfg.retrieve.max_sections).strip() for k, v in FIELD_DESC.items()}
    text: dict[str, Any] = {"type": "string"}
    props: dict[str, dict[str, Any]] = {k: {**text, "description": d[k]} for k in SEARCH_FIELDS if k != "searches"}
    item = _schema({"type": {"type": "string", "enum": list(SEARCH_TYPES)}, "query": text}, ["type", "query"])
    props["searches"] = {"type": "array", "maxItems": MAX_SEARCHES, "items": item,
                         "description": d["searches"]}
    props["limit"] = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 10,
                      "description": d["limit"]}
    props["rerank"] = {"type": "boolean", "description": d["rerank"]}
    props["sections"] = {"type": "integer", "minimum": 1, "maximum": tools.cfg.retrieve.max_sections,
                         "description": d["sections"]}
    one_or_many = {"anyOf": [text, {"type": "array", "items": text}]}
    props["filter"] = {**_schema({k: one_or_many for k in FILTER_KINDS}, []), "description": d["filter"]}
    num, line = {"type": "number"}, {"type": ["integer", "null"]}
    section = _schema({"heading": text, "line_from": line, "line_to": line, "score": num, "snippet": text,
                       "ref": text}, ["heading", "line_from", "line_to", "score", "snippet", "ref"])
    page = _schema({k: text for k in ("path", "title", "heading", "snippet")} | {"score": num}
                   | {"sections": {"type": "array", "items": section}},
                   ["path", "title", "heading", "snippet", "score"])
    out = _schema({"results": {"type": "array", "items": page}, "hint": text,
                   "hints": {"type": "array", "items": text}}, ["results"])
    ro = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
    get_props = {k: {**text, "description": v} for k, v in GET_FIELDS.items()}
    return [
        types.Tool(name="search", description=SEARCH_DESC.format(lang=lang).strip(),
                   input_schema=_schema(props, ["query"]), output_schema=out, annotations=ro),
        types.Tool(name="get", description=GET_DESC, input_schema=_schema(get_props, ["path"]),
                   annotations=ro),
        types.Tool(name="status", description=STATUS_DESC, input_schema=_schema({}, []), annotations=ro),
    ]


def build_server(tools: FanoutTools) -> Server:
    """A low-level MCP server whose tool calls run in worker threads."""
    listed = tool_list(tools)
    handlers = {"search": tools.search, "get": tools.get, "status": tools.status}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        fn = handlers.get(params.name)
        try:
            if fn is None:
                raise ToolArgError(f"unknown tool {params.name!r}; tools: {sorted(handlers)}")
            data = await anyio.to_thread.run_sync(fn, dict(params.arguments or {}))
        except NoteError as e:  # ToolArgError and the note resolver's errors
            return types.CallToolResult(content=[types.TextContent(type="text", text=str(e))], is_error=True)
        except Exception as e:  # a failure inside the pipeline: report it, keep serving
            log.exception("tool %s failed", params.name)
            msg = f"{params.name} failed: {type(e).__name__}: {e}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=msg)], is_error=True)
        # `get` answers with the markdown itself; search and status with compact JSON
        text = data["text"] if params.name == "get" else json.dumps(data, ensure_ascii=False,
                                                                     separators=(",", ":"))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=data)

    instructions = INSTRUCTIONS.format(notes=sum(tools.langs.values()), lang=language_line(tools.langs))
    return Server("fanout", version="0.1.0", instructions=instructions,
                  on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(server: Server) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


class BearerAuth:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401 and reaches nothing."""

    def __init__(self, app: Any, token: str):
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":  # http (and anything else) must carry the token
            got = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
            scheme, _, given = got.partition(b" ")
            if not (scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)):
                if scope["type"] != "http":
                    return
                msg = ("missing or wrong bearer token: send the header `Authorization: Bearer <token>` with the "
                       "token of `fanout mcp --http` (its log names the file)")
                # a JSON-RPC error, so that an MCP client shows this message rather than a bare status
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": msg}}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()),
                                        (b"www-authenticate", b'Bearer realm="fanout"')]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_token(db: str, token_file: str | None) -> tuple[str, str]:
    """(token, where it came from) for `fanout mcp --http`: `--token-file`, else $FANOUT_MCP_TOKEN, else
    `<db>/.fanout-mcp-token`. A token file that does not exist is created (0600) with a random token, and
    kept for the next start, so a client's configured header stays valid."""
    import secrets

    from fanout.errors import UserError
    from fanout.io.private_files import read_private, write_private
    from fanout.serve.client import port_path

    if token_file is None and os.environ.get(ENV_TOKEN):
        token, where = os.environ[ENV_TOKEN].strip(), f"${ENV_TOKEN}"
    else:
        where = token_file or port_path(db, TOKEN_FILE)
        if not os.path.lexists(where):
            os.makedirs(os.path.dirname(os.path.abspath(where)), mode=0o700, exist_ok=True)
            write_private(where, secrets.token_urlsafe(32) + "\n", replace=False)  # lost a race: read theirs
        token = read_private(where, "the MCP token file")
    if not TOKEN_CHARS.fullmatch(token):
        raise UserError(f"the MCP token from {where} must be 16 to 512 letters, digits or `._~+/=-`, got "
                        f"{len(token)} characters; delete the file to get a new random one")
    return token, where


async def serve_http(server: Server, port: int, token: str) -> None:
    import uvicorn

    app = BearerAuth(server.streamable_http_app(host="127.0.0.1"), token)
    await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")).serve()


def main_mcp(args: argparse.Namespace) -> int:
    """`fanout mcp --db DIR --collection NAME [--http PORT]`: serve until the client disconnects."""
    from fanout.cli.startup import config_from_args
    from fanout.exec.runner_mode import make_runner

    port = None
    if args.http is not None:
        if not str(args.http).isdigit() or not 1 <= int(args.http) <= 65535:
            raise UserError(f"--http must be a port number from 1 to 65535, got {args.http!r}")
        port = int(args.http)
    cfg = config_from_args(args)
    token_file = getattr(args, "token_file", None)
    if token_file is not None and port is None:
        raise UserError("--token-file is for --http (stdio needs no token: the client started the server)")
    with make_runner(cfg, n_rows=1) as runner:
        if getattr(args, "watch", None):  # a new db: the first round runs before the tools open the index
            from fanout.serve.http import first_index

            first_index(KnowledgeBase.attach(args.db, args.collection, cfg, runner), args.watch)
        tools = FanoutTools(args.db, args.collection, cfg, runner)  # fails first on a missing index
        token, where = http_token(str(args.db), token_file) if port is not None else ("", "")
        server = build_server(tools)
        threading.Thread(target=tools.warm, name="warm", daemon=True).start()
        watcher = None
        if getattr(args, "watch", None):  # rounds under the tools' lock; every request pins the latest version
            from fanout.cli.index_watch import round_printer

            watcher = tools.kb.watch(args.watch, on_round=round_printer(sys.stderr))  # stdout is MCP's
        try:
            if port is None:
                anyio.run(serve_stdio, server)
            else:
                log.warning("fanout mcp: streamable HTTP on http://127.0.0.1:%d/mcp; clients send the header "
                            "`Authorization: Bearer <token>`, the token in %s", port, where)
                anyio.run(serve_http, server, port, token)
        finally:
            if watcher is not None:
                watcher.stop()
    return 0
