"""Stage: weighted Reciprocal Rank Fusion at page level (Cormack, Clarke & Buettcher, SIGIR 2009).

score(page) = sum over lists of w_list / (k + rank) + a top-rank bonus (qmd: +0.05 for a 1st place in any
list, +0.02 for a 2nd-3rd place, counted once per page). The original query's lists weigh `w_original`,
each variant kind its own weight, the exact alias lane `w_alias`. Each page keeps the chunk of its best
(highest-contribution) list as its best chunk. `_norm` is the score divided by the best score any page
could reach for that query (first in every list), so 1.0 means "first everywhere" and scores compare
across queries.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from fanout.config import FuseConfig
from fanout.schemas import FUSED


def list_weight(kind: str, lane: str, cfg: FuseConfig) -> float:
    if lane == "alias":
        return cfg.w_alias
    if lane in ("title_vec", "heading_vec"):
        return cfg.w_title_vec if lane == "title_vec" else cfg.w_heading_vec
    w = {"orig": cfg.w_original, "lex": cfg.w_lex, "vec": cfg.w_vec, "hyde": cfg.w_hyde}[kind]
    return w * cfg.fts_scale if lane == "fts" else w


def fuse_rrf(hits: pa.Table, cfg: FuseConfig, qids: list[str] | None = None) -> pa.Table:
    """HITS -> FUSED rows, best first per query (ties broken by path for determinism)."""
    score: dict[tuple[str, str], float] = defaultdict(float)
    best: dict[tuple[str, str], tuple[float, str]] = {}
    top: dict[tuple[str, str], int] = {}
    max_score: dict[str, float] = defaultdict(float)
    seen_lists: set[tuple[str, int, str]] = set()
    for h in hits.to_pylist():
        key = (h["qid"], h["path"])
        w = list_weight(h["kind"], h["lane"], cfg)
        contrib = w / (cfg.k + h["_rank"])
        score[key] += contrib
        if key not in best or contrib > best[key][0]:
            best[key] = (contrib, h["chunk_id"])
        top[key] = min(top.get(key, 99), h["_rank"])
        lst = (h["qid"], h["vid"], h["lane"])
        if lst not in seen_lists:
            seen_lists.add(lst)
            max_score[h["qid"]] += w / (cfg.k + 1)
    for key, r in top.items():
        score[key] += cfg.bonus_first if r == 1 else cfg.bonus_top3 if r <= 3 else 0.0
    per_q: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for (qid, path), s in score.items():
        per_q[qid].append((path, s))
    rows = []
    for qid in (qids if qids is not None else sorted(per_q)):
        ranked = sorted(per_q.get(qid, []), key=lambda x: (-x[1], x[0]))
        denom = max_score[qid] + cfg.bonus_first
        for rank, (path, s) in enumerate(ranked, 1):
            rows.append({"qid": qid, "path": path, "chunk_id": best[(qid, path)][1], "_rrf": s,
                         "_norm": min(1.0, s / denom) if denom > 0 else 0.0, "_rank": rank})
    return pa.Table.from_pylist(rows, schema=FUSED)
