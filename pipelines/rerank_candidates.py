"""Stage: rerank the top pages of each query by their best passage, and blend with the fused score.

Each page goes to the Reranker by its best passage (the window of its best chunk with the most query terms,
about `passage_tokens` long, prefixed by title and heading), not a whole chunk: shorter input, same signal.
Identical (query, passage) pairs are scored once; scores are cached per (model, query, passage), read by
LookupRerank in the CPU pool so that the reranker's process holds only the model.

Blend (qmd's bands, but on the normalised fused score instead of 1/rank, so that a weak top result does not
score >= 0.75 whatever the reranker says: qmd's defect #697):
    final = w * fused_norm + (1 - w) * rerank, w = blend[0] (ranks 1-3), blend[1] (4-10), blend[2] (11+)
"""

from __future__ import annotations

import logging

import pyarrow as pa
from fanout.pipelines.passages import best_passage, query_keys, snippet  # noqa: F401  (re-exported)

from fanout.config import Config
from fanout.exec.runner import Runner
from fanout.models.identity import model_key
from fanout.schemas import CANDIDATE, set_column
from fanout.store.caches import NEW_COLUMNS, ROW_TYPES, Caches
from fanout.store.db import Collection

log = logging.getLogger(__name__)
def blend_weight(rank: int, bands: tuple[float, float, float]) -> float:
    return bands[0] if rank <= 3 else bands[1] if rank <= 10 else bands[2]


def blend(cands: list[dict], scores: dict[tuple[str, str | None, str], float | None], query: str,
          intent: str | None, cfg: Config) -> list[dict]:
    """One query's candidates with `_rerank` and the blended `score`, re-sorted (reranked window first)."""
    rc = cfg.rerank
    out = []
    for c in cands:
        if c["_rank"] <= rc.top_n:
            s = scores.get((query, intent, c["passage"]))
            w = blend_weight(c["_rank"], rc.blend) if s is not None else 1.0  # no score: fused only
            out.append({**c, "_rerank": s, "score": w * c["_norm"] + (1 - w) * (s or 0.0)})
        else:  # below the reranked window: fused order, after every reranked page
            out.append({**c, "_rerank": None, "score": blend_weight(c["_rank"], rc.blend) * c["_norm"]})
    out.sort(key=lambda r: (r["_rank"] > rc.top_n, -r["score"], r["_rank"]))
    return out


def top_pairs(rows: list[dict], top_n: int) -> dict[tuple[str, str | None, str], int]:
    """The distinct (query, intent, passage) pairs of the reranked window, each with the first row it is in."""
    pairs: dict[tuple[str, str | None, str], int] = {}
    for i, r in enumerate(rows):
        if r["error"] is None:
            for c in r["candidates"] or []:
                if c["_rank"] <= top_n:
                    pairs.setdefault((r["query"], r["intent"], c["passage"]), i)
    return pairs


class LookupRerank:
    """Stage (CPU pool): the rerank cache's scores of each query's top `rerank.top_n` candidates, set as their
    `_rerank` (null: not cached). Read here, so the reranker's pool holds only the model (no index, no
    lancedb); RerankCandidates then scores only the pairs still null."""

    def __init__(self, cfg: Config, db: str, collection: str, model: str | None = None):
        """`model`: the reranker's cache identity as the driver resolved it (the compositions pass it, so a CPU
        node never needs the model file); resolved here when None."""
        self.cfg = cfg
        self.caches = Caches(Collection(db, collection, cfg), "", cfg.models.embed_prompt,
                             memory_rows=cfg.cache.memory_rows) if cfg.cache.enabled else None
        self.model = (model or model_key(cfg, "reranker")) if self.caches else None
        self.stats: dict[str, int] = {"pairs": 0, "cached": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        top_n = self.cfg.rerank.top_n
        rows = batch.select(["query", "intent", "error", "candidates"]).to_pylist()
        pairs = top_pairs(rows, top_n)
        scores = self.caches.get_rerank(self.model, list(pairs)) if self.caches and self.model and pairs else {}
        self.stats["pairs"] += len(pairs)
        self.stats["cached"] += len(scores)
        if not scores:
            return batch
        cands = [[{**c, "_rerank": scores.get((r["query"], r["intent"], c["passage"]))} if c["_rank"] <= top_n
                  else c for c in r["candidates"]] if r["candidates"] is not None else None for r in rows]
        return set_column(batch, "candidates", pa.array(cands, pa.list_(CANDIDATE)))


class RerankCandidates:
    """Model stage: score each query's top `rerank.top_n` candidates by their passage and blend (see above).

    Scores LookupRerank found in the cache (a candidate's `_rerank`) are kept; the missing (query, intent,
    passage) pairs go to the reranker in one runner call per batch; new scores leave as `_new_rr` rows.
    Opens no index.
    """

    def __init__(self, cfg: Config, runner: Runner | None = None):
        self.cfg = cfg
        self.runner = runner or Runner(cfg)
        self.model = model_key(cfg, "reranker")
        self.stats: dict[str, int] = {"scored": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        top_n = self.cfg.rerank.top_n
        rows = batch.select(["query", "intent", "error", "candidates"]).to_pylist()
        pairs = top_pairs(rows, top_n)
        scores: dict[tuple[str, str | None, str], float | None] = {}
        for r in rows:
            if r["error"] is None:
                for c in r["candidates"] or []:
                    if c["_rank"] <= top_n and c["_rerank"] is not None:
                        scores[(r["query"], r["intent"], c["passage"])] = c["_rerank"]
        missing = [k for k in pairs if k not in scores]
        new_rows: list[list[dict]] = [[] for _ in rows]
        if missing:
            res = self.runner.map("reranker", pa.table({
                "query": [q for q, _, _ in missing], "intent": pa.array([i for _, i, _ in missing], pa.string()),
                "passage": [p for _, _, p in missing]}))
            new = dict(zip(missing, res["_rerank"].to_pylist()))
            scores.update(new)
            if self.cfg.cache.enabled:  # a failed pair (null score) is not cached: it is retried next time
                for k, v in new.items():
                    if v is not None:
                        new_rows[pairs[k]] += Caches.rerank_rows(self.model, {k: v})
        self.stats["scored"] += len(missing)
        cands = [blend(r["candidates"] or [], scores, r["query"], r["intent"], self.cfg)
                 if r["error"] is None else None for r in rows]
        batch = set_column(batch, "candidates", pa.array(cands, pa.list_(CANDIDATE)))
        return set_column(batch, NEW_COLUMNS["rerank"], pa.array(new_rows, pa.list_(ROW_TYPES["rerank"])))
