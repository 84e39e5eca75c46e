"""Stage: rerank the top pages of each query by their best passage, and blend with the fused score.

Each page goes to the Reranker by its best passage (the window of its best chunk with the most query terms,
about `passage_tokens` long, prefixed by title and heading), not a whole chunk: shorter input, same signal.
Identical (query, passage) pairs are scored once; scores are cached per (model, query, passage).

Blend (qmd's bands, but on the normalised fused score instead of 1/rank, so that a weak top result does not
score >= 0.75 whatever the reranker says: qmd's defect #697):
    final = w * fused_norm + (1 - w) * rerank, w = blend[0] (ranks 1-3), blend[1] (4-10), blend[2] (11+)
"""

from __future__ import annotations

import logging

import pyarrow as pa

from actors._llama import model_id
from fanout.caches import Caches
from fanout.config import Config
from fanout.runner import Runner
from fanout.text import est_tokens, stem_key, terms

log = logging.getLogger(__name__)


def best_passage(text: str, query: str, max_tokens: int) -> str:
    """The run of lines of `text` (about max_tokens long) holding the most query terms."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return text.strip()
    qk = {stem_key(t) for t in terms(query)}
    hits = [sum(stem_key(t) in qk for t in terms(ln)) for ln in lines]
    best, best_i, best_j = -1, 0, 1
    for i in range(len(lines)):
        size, score, j = 0, 0, i
        while j < len(lines) and (j == i or size + est_tokens(lines[j]) <= max_tokens):
            size += est_tokens(lines[j])
            score += hits[j]
            j += 1
        if score > best:
            best, best_i, best_j = score, i, j
    passage = "\n".join(lines[best_i:best_j])
    limit = max_tokens * 6  # a single over-long line: cut by characters
    return passage if len(passage) <= limit else passage[:limit]


def blend_weight(rank: int, bands: tuple[float, float, float]) -> float:
    return bands[0] if rank <= 3 else bands[1] if rank <= 10 else bands[2]


def rerank_candidates(fused: pa.Table, passages: dict[tuple[str, str], str], queries: dict[str, dict],
                      runner: Runner, cfg: Config, caches: Caches | None = None) -> pa.Table:
    """fused + `_rerank` + `score`, re-sorted per query. `passages[(qid, path)]` is each page's passage."""
    rc = cfg.rerank
    rows = fused.to_pylist()
    top = [r for r in rows if r["_rank"] <= rc.top_n]
    pairs = {(queries[r["qid"]]["query"], queries[r["qid"]].get("intent"), passages[(r["qid"], r["path"])])
             for r in top}
    model = model_id(cfg, "reranker")
    scores = caches.get_rerank(model, list(pairs)) if caches else {}
    missing = [k for k in pairs if k not in scores]
    if missing:
        batch = pa.table({"query": [q for q, _, _ in missing],
                          "intent": pa.array([i for _, i, _ in missing], pa.string()),
                          "passage": [p for _, _, p in missing]})
        res = runner.map("reranker", batch)
        new = dict(zip(missing, res["_rerank"].to_pylist()))
        if caches:  # a failed pair (null score) is not cached: it is retried next time
            caches.put_rerank(model, {k: v for k, v in new.items() if v is not None})
        scores.update(new)
    out = []
    for r in rows:
        q = queries[r["qid"]]
        if r["_rank"] <= rc.top_n:
            s = scores[(q["query"], q.get("intent"), passages[(r["qid"], r["path"])])]
            w = blend_weight(r["_rank"], rc.blend) if s is not None else 1.0  # no score: fused only
            out.append({**r, "_rerank": s, "score": w * r["_norm"] + (1 - w) * (s or 0.0)})
        else:  # below the reranked window: fused order, after every reranked page
            out.append({**r, "_rerank": None, "score": blend_weight(r["_rank"], rc.blend) * r["_norm"]})
    out.sort(key=lambda r: (r["qid"], r["_rank"] > rc.top_n, -r["score"], r["_rank"]))
    return pa.Table.from_pylist(out)
