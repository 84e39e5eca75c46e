"""The full-text and alias lanes' helpers, shared by ProbeBM25 (the original query's BM25 list), Retrieve
(keyword variants, the alias lane) and the grounded expansion
prompt: BM25 page lists over the per-language columns, the title/alias map, hit rows."""

from __future__ import annotations

import re
from collections import defaultdict

from fanout.config import Config
from fanout.store.chunk_text import rows_by_chunk_id
from fanout.store.db import Collection, fts_columns
from fanout.text import nfc

_NON_WORD = re.compile(r"[^\w\s'-]+", re.UNICODE)


def fts_text(q: str) -> str:
    """Plain words only: the FTS parser must not see quotes, colons or brackets from a question."""
    return " ".join(_NON_WORD.sub(" ", q).split())


def column_pages(paths: list[str], chunk_ids: list[str], scores: list[float], k: int) -> list[dict]:
    """Chunk hits (columns, best first) collapsed to pages, each with its best chunk; cut to k pages."""
    seen: set[str] = set()
    out = []
    for p, c, s in zip(paths, chunk_ids, scores):
        if p in seen:
            continue
        seen.add(p)
        out.append({"path": p, "chunk_id": c, "_score": float(s)})
        if len(out) == k:
            break
    return out


def index_languages(col: Collection) -> list[str]:
    """The languages of the indexed notes (documents `lang`), built once per index version."""
    def build() -> list[str]:
        t = col.read(col.documents_name, ["lang"])
        return sorted({x for x in t["lang"].to_pylist() if x})
    return col.memo("filter_languages", build)


def fts_targets(col: Collection, cfg: Config) -> tuple[list[str], list[float]]:
    """The FTS columns a search covers and their boosts: body/title/heading of each language the index's
    notes are in. A language's columns are NULL for every other note, so leaving them out returns the same
    lists (checked on the benchmark: 236 of 236 identical) for fewer columns per search (one language of
    two: ~20% less CPU per Lance call)."""
    present = set(index_languages(col))
    cols = fts_columns(tuple(lg for lg in cfg.index.languages if lg in present) or cfg.index.languages)
    r = cfg.retrieve
    boost = {"body": r.fts_boost_body, "title": r.fts_boost_title, "heading": r.fts_boost_heading}
    return cols, [boost[c.split("_", 1)[0]] for c in cols]


def fts_page_lists(col: Collection, texts: list[str], cfg: Config, wheres: list[str | None] | None = None
                   ) -> list[list[dict]]:
    """One BM25 page list per text, over the per-language body/title/heading columns with boosts
    (`fts_targets`); `wheres[i]` prefilters text i (fanout/filters.py)."""
    r = cfg.retrieve
    cols, boosts = fts_targets(col, cfg)
    tables = col.fts_search_many([fts_text(t) for t in texts], cols, boosts, r.k * 3, ["path", "chunk_id"],
                                 wheres)
    return [column_pages(t["path"].to_pylist(), t["chunk_id"].to_pylist(), t["_score"].to_pylist(), r.k)
            if t.num_rows else [] for t in tables]


def alias_key(s: str) -> str:
    s = nfc(s).casefold().strip()
    s = s.removesuffix(".md")
    return " ".join(_NON_WORD.sub(" ", s).split())


def alias_map(col: Collection) -> dict[str, list[str]]:
    """normalised title / alias / alias last path segment -> page paths (built once per index version)."""
    return col.memo("alias_map", lambda: _build_alias_map(col))


def _build_alias_map(col: Collection) -> dict[str, list[str]]:
    docs = col.read(col.documents_name, ["path", "title", "aliases"]).to_pylist()
    m: dict[str, list[str]] = defaultdict(list)
    for d in docs:
        keys = [d["title"], d["path"].rsplit("/", 1)[-1]]
        for a in d["aliases"] or []:
            keys += [a, a.rsplit("/", 1)[-1]]
        for key in {alias_key(k) for k in keys if k}:
            if key and d["path"] not in m[key]:
                m[key].append(d["path"])
    return dict(m)


def allowed_paths(col: Collection, where: str, paths: list[str]) -> list[str]:
    """The paths (of `paths`, in order) that have a chunk passing `where`: the alias lane's filter."""
    if not paths:
        return []
    inlist = ", ".join("'" + p.replace("'", "''") + "'" for p in paths)
    t = col.read(col.chunks_name, ["path"], f"({where}) AND path IN ({inlist})")
    ok = set(t["path"].to_pylist())
    return [p for p in paths if p in ok]


def hit_rows(qid: str, vid: int, kind: str, lane: str, pages: list[dict]) -> list[dict]:
    return [{"qid": qid, "vid": vid, "kind": kind, "lane": lane, "path": p["path"], "chunk_id": p["chunk_id"],
             "_rank": i, "_score": p["_score"]} for i, p in enumerate(pages, 1)]


def fetch_chunks(col: Collection, chunk_ids: set[str], memory_rows: int = 0) -> dict[str, dict]:
    """chunk_id -> {title, heading, text}, read by row id (one scan per 500 ids above
    `retrieve.rowid_map_rows`); with `memory_rows`, rows already read from
    this pinned index version come from memory (dropped when `refresh` moves to another version)."""
    mem: dict[str, dict] = col.memo("chunk_rows", dict) if memory_rows else {}
    out: dict[str, dict] = {c: mem[c] for c in chunk_ids if c in mem}
    ids = sorted(set(chunk_ids) - set(out))
    got = rows_by_chunk_id(col, ids, ["chunk_id", "title", "heading", "text"]) if ids else []
    if got is not None:  # by row id (fanout/store/chunk_rows.py): no scan of the table
        out.update((r["chunk_id"], r) for r in got)
        ids = []
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        where = "chunk_id IN (" + ", ".join("'" + c.replace("'", "''") + "'" for c in part) + ")"
        rows = col.read(col.chunks_name, ["chunk_id", "title", "heading", "text"], where, len(part)).to_pylist()
        for r in rows:
            out[r["chunk_id"]] = r
    if memory_rows:
        if len(mem) + len(out) > memory_rows:
            mem.clear()
        mem.update(out)
    return out
