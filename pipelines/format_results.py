"""Stage: ranked pages -> RESULTS rows (path, title, heading, snippet, score; `_explain` on request)."""

from __future__ import annotations

import json
from collections import defaultdict

import pyarrow as pa

from fanout.db import Collection
from fanout.schemas import RESULTS
from pipelines.rerank_candidates import best_passage


def fetch_chunks(col: Collection, chunk_ids: set[str]) -> dict[str, dict]:
    """chunk_id -> {title, heading, text} in one scan per 500 ids."""
    out: dict[str, dict] = {}
    ids = sorted(chunk_ids)
    tbl = col.table(col.chunks_name)
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        where = "chunk_id IN (" + ", ".join("'" + c.replace("'", "''") + "'" for c in part) + ")"
        res = tbl.search().where(where).select(["chunk_id", "title", "heading", "text"]).limit(len(part))
        with col.guard(col.chunks_name):
            rows = res.to_arrow().to_pylist()
        for r in rows:
            out[r["chunk_id"]] = r
    return out


def format_results(ranked: pa.Table, chunks: dict[str, dict], queries: dict[str, dict], n: int,
                   min_score: float = 0.0, hits: pa.Table | None = None, snippet_tokens: int = 60) -> pa.Table:
    """Top `n` pages per query with score >= min_score. `ranked` has qid, path, chunk_id, _rrf, score."""
    explain: dict[tuple[str, str], list[dict]] = defaultdict(list)
    if hits is not None:
        for h in hits.to_pylist():
            explain[(h["qid"], h["path"])].append(
                {"vid": h["vid"], "kind": h["kind"], "lane": h["lane"], "rank": h["_rank"],
                 "score": round(h["_score"], 4)})
    rows = []
    count: dict[str, int] = defaultdict(int)
    for r in ranked.to_pylist():
        qid = r["qid"]
        if count[qid] >= n or r["score"] < min_score:
            continue
        count[qid] += 1
        c = chunks.get(r["chunk_id"], {"title": r["path"], "heading": "", "text": ""})
        snip = " ".join(best_passage(c["text"], queries[qid]["query"], snippet_tokens).split())
        rows.append({
            "qid": qid, "rank": count[qid], "path": r["path"], "title": c["title"], "heading": c["heading"],
            "snippet": snip[:300], "score": round(float(r["score"]), 4), "_rrf": r["_rrf"],
            "_rerank": r.get("_rerank"),
            "_explain": json.dumps({"lists": explain[(qid, r["path"])], "rrf": round(r["_rrf"], 5),
                                    "fused_rank": r["_rank"], "rerank": r.get("_rerank")},
                                   ensure_ascii=False) if hits is not None else None,
        })
    return pa.Table.from_pylist(rows, schema=RESULTS)
