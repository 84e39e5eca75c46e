"""Stage: weighted Reciprocal Rank Fusion at page level (Cormack, Clarke & Buettcher, SIGIR 2009).

score(page) = sum over lists of w_list / (k + rank) + a top-rank bonus (qmd: +0.05 for a 1st place in any
list, +0.02 for a 2nd-3rd place, counted once per page). The original query's lists weigh `w_original`,
each variant kind its own weight, the exact alias lane `w_alias`. Each page keeps the chunk of its best (highest-contribution) list as its
best chunk.

`_norm` is what `--min-score` filters on, calibrated so that it separates real matches from noise:
- rank part: the score divided by the best score any page could reach, first in every list the query was
  SENT to (`sent`: one row per variant and lane), not only the lists that returned something; the alias
  lane counts only when it matched (it is an exact-title bonus lane, silent for most real questions);
- evidence part: every page of a query is multiplied by the query's absolute evidence, the larger of its
  best cosine (original and `vec` variants) and its best BM25 score, each mapped linearly from a floor
  (no evidence) to a full level (`FuseConfig.cos_*`, `bm25_*`); an exact title/alias match is full evidence.
One factor per query: calibration changes scores, never the order within a query.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa

from fanout.config import FuseConfig
from fanout.schemas import FUSED, LANE_KINDS

SENT = pa.schema([("qid", pa.string()), ("vid", pa.int32()), ("kind", pa.string()), ("lane", pa.string())])
_ROUTES = LANE_KINDS


def list_weight(kind: str, lane: str, cfg: FuseConfig) -> float:
    if lane == "alias":
        return cfg.w_alias
    w = {"orig": cfg.w_original, "lex": cfg.w_lex, "vec": cfg.w_vec, "hyde": cfg.w_hyde}[kind]
    return w * cfg.fts_scale if lane == "fts" else w


def sent_lists(variants: pa.Table, lanes: tuple[str, ...] | list[str]) -> pa.Table:
    """VARIANTS -> SENT: the (variant, lane) lists each query was routed to (retrieve_variants' routing)."""
    return pa.Table.from_pylist(sent_rows(variants.select(["qid", "vid", "kind"]).to_pylist(), lanes), schema=SENT)


def sent_rows(variants: list[dict], lanes: tuple[str, ...] | list[str]) -> list[dict]:
    """`sent_lists` over plain rows ({qid, vid, kind} each)."""
    return [{"qid": v["qid"], "vid": v["vid"], "kind": v["kind"], "lane": lane}
            for v in variants for lane in _ROUTES if lane in lanes and v["kind"] in _ROUTES[lane]]


def _ramp(x: float, floor: float, full: float) -> float:
    return 0.0 if x <= floor else 1.0 if x >= full else (x - floor) / (full - floor)


def evidence(cos_top: float, bm25_top: float, alias: bool, cfg: FuseConfig) -> float:
    """A query's absolute evidence in [0, 1]: max of the cosine and BM25 ramps; 1 for an alias match."""
    if alias:
        return 1.0
    return max(_ramp(cos_top, cfg.cos_floor, cfg.cos_full), _ramp(bm25_top, cfg.bm25_floor, cfg.bm25_full))


def fuse_rrf(hits: pa.Table, cfg: FuseConfig, qids: list[str] | None = None,
             sent: pa.Table | None = None) -> pa.Table:
    """HITS -> FUSED rows, best first per query (ties broken by path for determinism).

    `sent` (from `sent_lists`) names every list each query was sent to; without it the rank part is
    normalised by the lists that returned something (the old behaviour: a lone vector hit scores 1.0).
    """
    return pa.Table.from_pylist(fuse_rows(hits.to_pylist(), cfg, qids,
                                          sent.to_pylist() if sent is not None else None),
                                schema=FUSED)


def fuse_rows(hits: list[dict], cfg: FuseConfig, qids: list[str] | None = None, sent: list[dict] | None = None,
              keep: int | None = None) -> list[dict]:
    """`fuse_rrf` over plain rows (HITS and SENT as dicts, FUSED rows back): what Retrieve calls, with no Arrow
    round trip per batch; `keep` returns only each query's top `keep` pages (the same rows, cut)."""
    score: dict[tuple[str, str], float] = defaultdict(float)
    best: dict[tuple[str, str], tuple[float, str]] = {}
    top: dict[tuple[str, str], int] = {}
    lists: dict[tuple[str, int, str], float] = {}  # (qid, vid, lane) -> weight: the denominator's lists
    cos_top: dict[str, float] = defaultdict(float)
    bm25_top: dict[str, float] = defaultdict(float)
    alias_hit: set[str] = set()
    kind_w: dict[tuple[str, str], float] = {}  # list_weight per (kind, lane), computed once
    for h in hits:
        key = (h["qid"], h["path"])
        kl = (h["kind"], h["lane"])
        w = kind_w.get(kl)
        if w is None:
            w = kind_w[kl] = list_weight(h["kind"], h["lane"], cfg)
        contrib = w / (cfg.k + h["_rank"])
        score[key] += contrib
        if key not in best or contrib > best[key][0]:
            best[key] = (contrib, h["chunk_id"])
        top[key] = min(top.get(key, 99), h["_rank"])
        if sent is None or h["lane"] == "alias":
            lists[(h["qid"], h["vid"], h["lane"])] = w
        if h["lane"] == "vec" and h["kind"] in ("orig", "vec"):
            cos_top[h["qid"]] = max(cos_top[h["qid"]], float(h["_score"]))
        elif h["lane"] == "fts":
            bm25_top[h["qid"]] = max(bm25_top[h["qid"]], float(h["_score"]))
        elif h["lane"] == "alias":
            alias_hit.add(h["qid"])
    if sent is not None:
        for sl in sent:
            if sl["lane"] != "alias":
                lists[(sl["qid"], sl["vid"], sl["lane"])] = list_weight(sl["kind"], sl["lane"], cfg)
    max_score: dict[str, float] = defaultdict(float)
    for (qid, _, _), w in lists.items():
        max_score[qid] += w / (cfg.k + 1)
    for key, r in top.items():
        score[key] += cfg.bonus_first if r == 1 else cfg.bonus_top3 if r <= 3 else 0.0
    per_q: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for (qid, path), s in score.items():
        per_q[qid].append((path, s))
    rows = []
    for qid in (qids if qids is not None else sorted(per_q)):
        ranked = sorted(per_q.get(qid, []), key=lambda x: (-x[1], x[0]))
        if keep is not None:
            ranked = ranked[:keep]
        denom = max_score[qid] + cfg.bonus_first
        ev = evidence(cos_top[qid], bm25_top[qid], qid in alias_hit, cfg) if cfg.calibrate else 1.0
        for rank, (path, s) in enumerate(ranked, 1):
            rel = min(1.0, s / denom) if denom > 0 else 0.0
            rows.append({"qid": qid, "path": path, "chunk_id": best[(qid, path)][1], "_rrf": s,
                         "_norm": rel * ev, "_rank": rank})
    return rows
