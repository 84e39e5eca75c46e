"""The interactive search behind `fanout query / search / vsearch`, in-process or inside `fanout serve`.

One request dict in, one JSON-ready response dict out, so the CLI prints the same thing whether it ran the
pipeline itself or asked a warm server. Modes: `query` (the whole pipeline), `search` (full text only) and
`vsearch` (vectors only), the last two through the config's `retrieve.lanes`, without expansion or rerank.
Several collections (`-c a,b`) are searched one by one and merged by fused score over a shared normaliser:
each page's RRF score divided by the best score any page could reach in any of the collections (the largest of
their per-query normalisers), so a collection where the query found fewer lists (say, no full-text match) does
not look better than it is; for one collection this is the usual score. Reranked results merge by their
blended score. Ties keep the collection order given.
"""

from __future__ import annotations

import json
import math
import numbers
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fanout.config import Config
from fanout.defaults import DEFAULT_COLLECTION
from fanout.errors import FanoutError
from fanout.exec.runner import Runner

if TYPE_CHECKING:
    from fanout.pipelines.search import Searcher

MODES: dict[str, dict[str, Any]] = {
    "query": {},
    "search": {"retrieve": {"lanes": ("fts",)}},
    "vsearch": {"retrieve": {"lanes": ("vec",)}},
}
ROW_FIELDS = ("query", "intent", "short_query", "rephrased_query", "expected_answer")
FLAGS = ("expand", "rerank", "explain", "full", "line_numbers")  # true, false or null (the config's default)
REQUEST_FIELDS = ("mode", "collections", "n", "min_score", "filter", "sections", *FLAGS, *ROW_FIELDS)
COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # fanout.store.db.check_collection_name's rule


class RequestError(FanoutError, ValueError):
    """A malformed request or query (a 400 from `fanout serve`); the message names the field and what is
    allowed, `field` holds the field's name."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        # the field a message names first (`n`, `mode`, ...) unless given
        self.field = field or (m.group(1) if (m := re.search(r"`(\w+)`", message)) else None)


COLLECTION_RULE = ("letters, digits, `_`, `-` and `.`, starting with a letter or digit, at most 100 characters; "
                   "`fanout collection list` names them")


def check_collection(name: object) -> str:
    """`name` when it is a collection name (COLLECTION_NAME), else RequestError saying what is allowed."""
    if not isinstance(name, str) or not COLLECTION_NAME.fullmatch(name):
        raise RequestError(f"{_show(name)} is not a collection name ({COLLECTION_RULE})", field="collection")
    return name


def check_sections(value: Any, cap: int) -> int:
    """`sections` (--sections N) as a count: None -> 0 (off); else a whole number from 1 to `cap`
    (retrieve.max_sections), or RequestError naming the field, what was given and what is allowed."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
        raise RequestError(f"`sections` must be a whole number from 1 to {cap} (retrieve.max_sections; leave it "
                           f"out for pages only), got {_show(value)}", field="sections")
    return value


def check_min_score(value: Any) -> float:
    """`min_score` as a float from 0 to 1 (scores are in [0, 1]: more returns nothing, NaN keeps nothing), or
    RequestError naming the field, what was given and what is allowed."""
    if (not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value)
            or not 0.0 <= float(value) <= 1.0):
        raise RequestError(f"`min_score` must be a number from 0 to 1 (scores are in [0, 1]; 0 keeps every page), "
                           f"got {_show(value)}", field="min_score")
    return float(value)


def check_request(req: Any, max_results: int, max_sections: int = 20, max_collections: int = 16) -> None:
    """Raise RequestError unless `req` is an object of REQUEST_FIELDS with values of the right type and range.

    The row's text fields and `filter` are checked by the pipeline's own parser (their errors come back as
    error rows, as in a batch).
    """
    if not isinstance(req, dict):
        raise RequestError(f"the request must be an object with the fields {list(REQUEST_FIELDS)}, got "
                           f"{type(req).__name__}")
    extra = sorted(str(k) for k in set(req) - set(REQUEST_FIELDS))
    if extra:
        raise RequestError(f"unknown request field {extra[0][:40]!r}; allowed: {list(REQUEST_FIELDS)}")
    for key, value in req.items():
        if not _encodable(value):
            raise RequestError(f"`{key}` holds a lone surrogate (JSON \\ud800-\\udfff alone): not Unicode text; "
                               "send the text as UTF-8")
    mode = req.get("mode", "query")
    if not isinstance(mode, str) or mode not in MODES:
        raise RequestError(f"`mode` must be one of {sorted(MODES)}, got {_show(mode)}")
    names = req.get("collections")
    if names is not None:
        if not isinstance(names, list) or not names:
            raise RequestError(f"`collections` must be a non-empty list of collection names, got {_show(names)}")
        if len(names) > max_collections:
            raise RequestError(f"`collections` names {len(names)} collections; at most {max_collections} "
                               "(serve.max_collections) are searched in one request: split it", field="collections")
        for name in names:
            if not isinstance(name, str) or not COLLECTION_NAME.fullmatch(name):
                raise RequestError(f"`collections`: {_show(name)} is not a collection name ({COLLECTION_RULE})",
                                   field="collections")
        if len(set(names)) < len(names):
            twice = next(x for i, x in enumerate(names) if x in names[:i])
            raise RequestError(f"`collections` names {twice!r} more than once; name each collection once "
                               "(a page would come back at several ranks)", field="collections")
    n = req.get("n", 10)
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= max_results:
        raise RequestError(f"`n` must be a whole number from 1 to {max_results} (serve.max_results), got "
                           f"{_show(n)}")
    check_sections(req.get("sections"), max_sections)
    check_min_score(req.get("min_score", 0.0))
    for flag in FLAGS:
        if req.get(flag) is not None and not isinstance(req[flag], bool):
            raise RequestError(f"`{flag}` must be true, false or null, got {_show(req[flag])}")


def _encodable(value: Any) -> bool:
    """True unless a string in `value` (or in its lists and objects) cannot be written as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, list):
        return all(_encodable(v) for v in value)
    if isinstance(value, dict):
        return all(_encodable(k) and _encodable(v) for k, v in value.items())
    return True


def _show(value: Any) -> str:
    """A value for an error message, as JSON, cut at 60 characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:60] + "..."


class SearchService:
    """Searchers per (collection, mode), built once; `run(request)` answers one interactive query."""

    def __init__(self, db: str | Path, cfg: Config, runner: Runner):
        self.db, self.cfg, self.runner = str(db), cfg, runner
        self._searchers: dict[tuple[str, str], Any] = {}
        self.lock = threading.Lock()  # one search at a time: llama.cpp models are not thread-safe

    def searcher(self, collection: str, mode: str) -> Searcher:
        from fanout.pipelines.search import Searcher

        if mode not in MODES:
            raise ValueError(f"unknown search mode {mode!r}; choose one of {sorted(MODES)}")
        key = (collection, mode)
        if key not in self._searchers:
            cfg = self.cfg.replace(**MODES[mode]) if MODES[mode] else self.cfg
            self._searchers[key] = Searcher(self.db, collection, cfg, self.runner)
        return self._searchers[key]

    @property
    def opened(self) -> set[str]:
        """The collections with open Searchers."""
        return {name for name, _ in self._searchers}

    def forget(self, collections: set[str] | list[str] | tuple[str, ...]) -> None:
        """Drop the open Searchers of `collections` (re-indexed or removed since): the next request opens them
        anew at the index version their manifest pins then."""
        names = {collections} if isinstance(collections, str) else set(collections)
        with self.lock:
            for key in [k for k in self._searchers if k[0] in names]:
                del self._searchers[key]

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        from fanout.filters import as_option, parse_filter
        from fanout.pipelines.search import SearchOptions

        t0 = time.perf_counter()
        check_request(req, self.cfg.serve.max_results, self.cfg.retrieve.max_sections,
                      self.cfg.serve.max_collections)
        mode = req.get("mode", "query")
        row = {"id": "q", **{k: req[k] for k in ROW_FIELDS if req.get(k) is not None}}
        plain = mode != "query"
        opts = SearchOptions(n=int(req.get("n", 10)), min_score=float(req.get("min_score", 0.0)),
                             expand=False if plain else req.get("expand"),
                             rerank=False if plain else req.get("rerank"),
                             explain=bool(req.get("explain")),
                             filter=as_option(parse_filter(req.get("filter") or {})),
                             sections=check_sections(req.get("sections"), self.cfg.retrieve.max_sections))
        collections = req.get("collections") or [DEFAULT_COLLECTION]
        results: list[dict] = []
        errors: list[dict] = []
        timings: dict[str, float] = {}
        expansion: dict[str, str] = {}  # collection -> where the variants came from (agent, cache, model, ...)
        with self.lock:
            for ci, name in enumerate(collections):
                s = self.searcher(name, mode)
                out = s.search([row], opts)
                for k, v in out.timings.items():
                    timings[k] = timings.get(k, 0.0) + v
                expansion[name] = next((k for k, v in out.stats.get("expansion", {}).items() if v), "none")
                variants = {(v["qid"], v["vid"]): v for v in out.variants.to_pylist()}
                for r in out.results.to_pylist():
                    results.append(_result(r, name, ci, variants))
                errors += [{"collection": name, "field": e["field"], "error": e["error"]}
                           for e in out.errors.to_pylist()]
                if out.errors.num_rows:
                    break  # the same row fails the same way in every collection
        if len(collections) > 1:
            shared_norm(results)
            results = [r for r in results if r["score"] >= opts.min_score]
        results.sort(key=lambda r: (-r["score"], r["_ci"], r["rank"]))
        results = results[:opts.n]
        for i, r in enumerate(results, 1):
            r["rank"] = i
            for k in ("_ci", "_rrf", "_rerank"):
                r.pop(k)
        if req.get("line_numbers") or req.get("full"):
            self._add_text(results, bool(req.get("full")))
        timings["total"] = time.perf_counter() - t0
        resp = {"mode": mode, "collections": collections, "results": results, "errors": errors,
                "timings": {k: round(v, 4) for k, v in timings.items()}, "expansion": expansion}
        if opts.explain:  # the query-level facts (the same in every result's explanation)
            ex: dict[str, Any] = next((r["explain"] for r in results if r.get("explain")), {})
            resp["explain"] = {"query": ex.get("query") or req.get("query"), "probe": ex.get("probe"),
                               "filter": ex.get("filter")}
        return resp

    def _add_text(self, results: list[dict], full: bool) -> None:
        from fanout.api.notes import NoteError, find_file, line_of, note_lines, read_note

        vaults: dict[str, Path | None] = {}
        for r in results:
            name = r["collection"]
            if name not in vaults:
                v = self._searchers[next(k for k in self._searchers if k[0] == name)].col.read_manifest()
                vaults[name] = Path(v["vault"]).resolve() if v.get("vault") else None
            try:
                target = find_file(vaults[name], r["path"], "result path")
                if target is None:
                    raise NoteError(f"{r['path']!r} is no longer in the vault; re-run `fanout index`")
                note = read_note(vaults[name], target)
                r["line"] = line_of(note, r["snippet"], r["heading"] or None)
                if full:
                    head, first, lines = note_lines(note, r["heading"] or None)
                    r["section"] = {"heading": head, "first_line": first, "text": "\n".join(lines)}
            except NoteError as e:
                r["line"] = None
                if full:
                    r["section"] = {"heading": r["heading"], "first_line": None, "text": "", "error": str(e)}


def shared_norm(results: list[dict]) -> None:
    """Rescore unreranked results of several collections as RRF / the largest per-collection normaliser.

    Each collection's score is `_rrf / denom_c` (fuse_rrf's `_norm`), so `denom_c = _rrf / score`; the
    shared score is `_rrf / max_c denom_c`.
    """
    if any(r["_rerank"] is not None for r in results):
        return
    denom: dict[int, float] = {}
    for r in results:
        if r["score"] > 0 and r["_rrf"]:
            d = r["_rrf"] / r["score"]
            denom[r["_ci"]] = max(denom.get(r["_ci"], 0.0), d)
    top = max(denom.values(), default=0.0)
    if top > 0:
        for r in results:
            r["score"] = round(min(1.0, r["_rrf"] / top), 4) if r["_rrf"] else 0.0


def _result(r: dict, collection: str, ci: int, variants: dict) -> dict:
    out = {"collection": collection, "rank": r["rank"], "path": r["path"], "title": r["title"],
           "heading": r["heading"], "snippet": r["snippet"], "score": r["score"], "_ci": ci, "_rrf": r["_rrf"],
           "_rerank": r["_rerank"]}
    if "sections" in r:  # --sections N: each page's best sections (pipelines/pick_sections.py)
        out["sections"] = r["sections"] or []
    if r.get("_explain"):
        ex = json.loads(r["_explain"])
        lists = []
        for h in ex.get("lists", []):
            v = variants.get((r["qid"], h["vid"]), {})
            lists.append({"lane": h["lane"], "kind": h["kind"], "text": h.get("text") or v.get("text", ""),
                          "source": v.get("source", ""), "rank": h["rank"], "score": h["score"]})
        out["explain"] = {"lists": lists, "rrf": ex.get("rrf"), "fused_rank": ex.get("fused_rank"),
                          "rerank": ex.get("rerank"), "query": ex.get("query"), "probe": ex.get("probe"),
                          "filter": ex.get("filter")}
    return out
