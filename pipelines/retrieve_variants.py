"""Stage: route each variant to its lanes and collect page-level ranked lists (HITS).

Routing (qmd): `lex` -> full-text only; `vec`/`hyde` -> vectors only; the original query -> both. Plus an
exact title/alias lane for the original query and `lex` variants (OHS, trip2g-alias). All query vectors of a
batch are embedded in as few calls as possible and searched as ONE batched LanceDB vector search.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pyarrow as pa

from actors._llama import model_id
from fanout.caches import Caches
from fanout.config import Config
from fanout.db import Collection, fts_columns
from fanout.runner import Runner
from fanout.schemas import HITS
from fanout.text import nfc
from pipelines.retrieve_titles import TITLE_LANES, title_lane_hits

FTS_KINDS = ("orig", "lex")
VEC_KINDS = ("orig", "vec", "hyde")
ALIAS_KINDS = ("orig", "lex")
_NON_WORD = re.compile(r"[^\w\s'-]+", re.UNICODE)


def fts_text(q: str) -> str:
    """Plain words only: the FTS parser must not see quotes, colons or brackets from a question."""
    return " ".join(_NON_WORD.sub(" ", q).split())


def to_pages(rows: list[dict], k: int, score_key: str) -> list[dict]:
    """Collapse chunk hits (best first) to pages, keeping each page's best chunk; cut to k pages."""
    seen: set[str] = set()
    out = []
    for r in rows:
        if r["path"] in seen:
            continue
        seen.add(r["path"])
        out.append({"path": r["path"], "chunk_id": r["chunk_id"], "_score": float(r[score_key])})
        if len(out) == k:
            break
    return out


def fts_page_lists(col: Collection, texts: list[str], cfg: Config) -> list[list[dict]]:
    """One BM25 page list per text, over the per-language body/title/heading columns with boosts."""
    langs = cfg.index.languages
    cols = fts_columns(langs)
    r = cfg.retrieve
    boost = {"body": r.fts_boost_body, "title": r.fts_boost_title, "heading": r.fts_boost_heading}
    boosts = [boost[c.split("_", 1)[0]] for c in cols]
    tables = col.fts_search_many([fts_text(t) for t in texts], cols, boosts, r.k * 3, ["path", "chunk_id"])
    return [to_pages(t.to_pylist(), r.k, "_score") if t.num_rows else [] for t in tables]


def alias_key(s: str) -> str:
    s = nfc(s).casefold().strip()
    s = s.removesuffix(".md")
    return " ".join(_NON_WORD.sub(" ", s).split())


def alias_map(col: Collection) -> dict[str, list[str]]:
    """normalised title / alias / alias last path segment -> page paths (built once per collection)."""
    cached = getattr(col, "_alias_map", None)
    if cached is not None:
        return cached
    docs = col.table(col.documents_name).to_arrow().select(["path", "title", "aliases"]).to_pylist()
    m: dict[str, list[str]] = defaultdict(list)
    for d in docs:
        keys = [d["title"], d["path"].rsplit("/", 1)[-1]]
        for a in d["aliases"] or []:
            keys += [a, a.rsplit("/", 1)[-1]]
        for key in {alias_key(k) for k in keys if k}:
            if key and d["path"] not in m[key]:
                m[key].append(d["path"])
    col._alias_map = dict(m)
    return col._alias_map


def hit_rows(qid: str, vid: int, kind: str, lane: str, pages: list[dict]) -> list[dict]:
    return [{"qid": qid, "vid": vid, "kind": kind, "lane": lane, "path": p["path"], "chunk_id": p["chunk_id"],
             "_rank": i, "_score": p["_score"]} for i, p in enumerate(pages, 1)]


def embed_variants(variants: pa.Table, runner: Runner, caches: Caches | None, cfg: Config) -> dict[int, list]:
    """Vectors for the vector-lane rows of `variants`, keyed by row index; cached per (model, prompt, text)."""
    rows = [(i, v) for i, v in enumerate(variants.to_pylist()) if v["kind"] in VEC_KINDS]
    role_of = {"hyde": cfg.retrieve.hyde_prompt}
    keyed = [(i, role_of.get(v["kind"], "query"), v["text"]) for i, v in rows]
    found = caches.get_vectors([(r, t) for _, r, t in keyed]) if caches else {}
    missing = sorted({(r, t) for _, r, t in keyed if (r, t) not in found})
    if missing:
        batch = pa.table({"text": [t for _, t in missing], "role": [r for r, _ in missing]})
        out = runner.map("embedder", batch)
        new = dict(zip(missing, out["vector"].to_pylist()))
        if caches:
            caches.put_vectors(new)
        found.update(new)
    return {i: found[(r, t)] for i, r, t in keyed}


def retrieve_variants(variants: pa.Table, col: Collection, runner: Runner, cfg: Config,
                      caches: Caches | None = None, probe_hits: pa.Table | None = None) -> pa.Table:
    """VARIANTS -> HITS. `probe_hits` (the original queries' BM25 lists) are reused, not searched again."""
    k = cfg.retrieve.k
    rows = variants.to_pylist()
    out: list[dict] = []
    done_fts = set()
    lanes = set(cfg.retrieve.lanes)
    if probe_hits is not None and probe_hits.num_rows and "fts" in lanes:
        out.extend(probe_hits.to_pylist())
        done_fts = {(h["qid"], h["vid"]) for h in out}
    fts_rows = [v for v in rows if "fts" in lanes and v["kind"] in FTS_KINDS and (v["qid"], v["vid"]) not in done_fts]
    for v, pages in zip(fts_rows, fts_page_lists(col, [v["text"] for v in fts_rows], cfg)):
        out.extend(hit_rows(v["qid"], v["vid"], v["kind"], "fts", pages))
    vecs = embed_variants(variants, runner, caches, cfg) if lanes & {"vec", *TITLE_LANES} else {}
    if vecs and "vec" in lanes:
        order = sorted(vecs)
        res = col.vector_search_many([vecs[i] for i in order], k * 3, ["path", "chunk_id"])
        by_q: dict[int, list[dict]] = defaultdict(list)
        for r in sorted(res.to_pylist(), key=lambda r: (r["query_index"], r["_distance"])):
            r["_sim"] = 1.0 - float(r["_distance"])
            by_q[int(r["query_index"])].append(r)
        for qi, i in enumerate(order):
            v = rows[i]
            out.extend(hit_rows(v["qid"], v["vid"], v["kind"], "vec", to_pages(by_q[qi], k, "_sim")))
    if lanes & set(TITLE_LANES) and vecs:
        out.extend(title_lane_hits([(rows[i], vecs[i]) for i in sorted(vecs)], col, runner, cfg,
                                   model_id(cfg, "embedder")))
    if "alias" in lanes:
        amap = alias_map(col)
        for v in rows:
            if v["kind"] in ALIAS_KINDS and (paths := amap.get(alias_key(v["text"]))):
                pages = [{"path": p, "chunk_id": f"{p}#0", "_score": 1.0} for p in paths[:k]]
                out.extend(hit_rows(v["qid"], v["vid"], v["kind"], "alias", pages))
    return pa.Table.from_pylist(out, schema=HITS)
