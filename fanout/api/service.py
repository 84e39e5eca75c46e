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
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fanout.api.requests import MODES, SearchRequest, parse_search_request
from fanout.config import Config
from fanout.defaults import DEFAULT_COLLECTION
from fanout.errors import RequestError
from fanout.exec.runner import Runner

if TYPE_CHECKING:
    from fanout.api.types import ErrorRow, ResultRow, SearchResponse
    from fanout.pipelines.search import Searcher

class SearchService:
    """Searchers per (collection, mode), built once; `run(request)` answers one interactive query."""

    def __init__(self, db: str | Path, cfg: Config, runner: Runner):
        self.db, self.cfg, self.runner = str(db), cfg, runner
        self._searchers: dict[tuple[str, str], Searcher] = {}
        self.lock = threading.Lock()  # one search at a time: llama.cpp models are not thread-safe

    def searcher(self, collection: str, mode: str) -> Searcher:
        if mode not in MODES:
            raise RequestError(f"unknown search mode {mode!r}; choose one of {sorted(MODES)}")
        key = (collection, mode)
        if key not in self._searchers:
            self._searchers[key] = self.new_searcher(collection, mode)
        return self._searchers[key]

    def new_searcher(self, collection: str, mode: str) -> Searcher:
        """A Searcher of `collection` in `mode`, not kept (`searcher` keeps one; fanout/api/next_version.py
        prepares one for a swap)."""
        from fanout.pipelines.search import Searcher

        cfg = self.cfg.replace(**MODES[mode]) if MODES[mode] else self.cfg
        return Searcher(self.db, collection, cfg, self.runner)

    def opened_searchers(self) -> dict[tuple[str, str], Searcher]:
        """The open Searchers by (collection, mode) (a copy)."""
        return dict(self._searchers)

    def install(self, collection: str, searchers: dict[tuple[str, str], Searcher]) -> None:
        """Replace the open Searchers of `collection` by `searchers` (made ready at a new index version)."""
        with self.lock:
            for key in [k for k in self._searchers if k[0] == collection]:
                del self._searchers[key]
            self._searchers.update(searchers)

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

    def parse(self, req: object) -> SearchRequest:
        """A JSON request as a SearchRequest, checked against this config's limits (RequestError if not)."""
        return parse_search_request(req, self.cfg.serve.max_results, self.cfg.retrieve.max_sections,
                                    self.cfg.serve.max_collections)

    def run(self, req: SearchRequest | Mapping[str, Any]) -> SearchResponse:
        """One search -> the JSON-ready response (mode, collections, results, errors, timings, expansion and,
        with `explain`, the query-level explanation). A mapping is parsed first (`parse`)."""
        from fanout.filters import as_option, parse_filter
        from fanout.pipelines.search import SearchOptions

        t0 = time.perf_counter()
        if not isinstance(req, SearchRequest):
            req = self.parse(req)
        mode = req.mode
        row = req.row()
        plain = mode != "query"
        opts = SearchOptions(n=req.n, min_score=req.min_score,
                             expand=False if plain else req.expand,
                             rerank=False if plain else req.rerank,
                             explain=req.explain,
                             filter=as_option(parse_filter(req.filter or {})),
                             sections=req.sections)
        collections = list(req.collections) or [DEFAULT_COLLECTION]
        results: list[dict[str, Any]] = []  # ResultRow and the merge's own keys (_ci, _rrf, _rerank)
        errors: list[ErrorRow] = []
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
        if req.line_numbers or req.full:
            self._add_text(results, req.full)
        timings["total"] = time.perf_counter() - t0
        rows = cast("list[ResultRow]", results)  # the merge's own keys are gone: ResultRow's fields alone
        resp: SearchResponse = {"mode": mode, "collections": collections, "results": rows, "errors": errors,
                                "timings": {k: round(v, 4) for k, v in timings.items()}, "expansion": expansion}
        if opts.explain:  # the query-level facts (the same in every result's explanation)
            ex: dict[str, Any] = next((r["explain"] for r in results if r.get("explain")), {})
            resp["explain"] = {"query": ex.get("query") or req.query, "probe": ex.get("probe"),
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
