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
import re

import pyarrow as pa

from fanout.caches import NEW_COLUMNS, ROW_TYPES, Caches
from fanout.config import Config
from fanout.db import Collection
from fanout.runner import Runner, model_id
from fanout.schemas import CANDIDATE
from fanout.text import est_tokens, stem_key, terms

log = logging.getLogger(__name__)
_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)  # fanout.text's word pattern, with positions


_MD_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]")


def query_keys(*texts: str | None) -> set[str]:
    """Crude stems of the terms of the query and of its keyword variants (an agent's short_query)."""
    return {stem_key(t) for text in texts if text for t in terms(text)}


def _focus(text: str, keys: set[str], limit: int) -> str:
    """At most `limit` characters of `text`, starting a little before its first query term when the term
    would fall outside the first `limit` characters (cut at word boundaries)."""
    if len(text) <= limit:
        return text
    start = 0
    for m in _WORD_RE.finditer(text):
        if stem_key(m.group(0).casefold()) in keys:
            if m.end() > limit:
                start = max(0, m.start() - limit // 4)
                while start > 0 and not text[start - 1].isspace():
                    start -= 1
            break
    return text[start:start + limit]


def best_passage(text: str, query: str, max_tokens: int, keys: set[str] | None = None) -> str:
    """The run of lines of `text` (about max_tokens long) holding the most distinct query terms, then the most
    hits (`keys`: the stems of query_keys(query, short_query), default the query's own).

    Heading lines are never a passage by themselves: they are left out whenever the text has other lines
    (the result shows its heading path separately), so a section whose first line is long gives that line,
    not its `## Heading`. With no term anywhere the first lines are taken; an over-long passage is cut by
    characters around its first query term.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return text.strip()
    body = [ln for ln in lines if not _MD_HEADING.match(ln)]
    lines = body or lines
    qk = query_keys(query) if keys is None else keys
    found = [[k for t in terms(ln) if (k := stem_key(t)) in qk] for ln in lines]
    best, best_i, best_j = (-1, -1), 0, 1
    for i in range(len(lines)):
        size, j, seen, hits = 0, i, set(), 0
        while j < len(lines) and (j == i or size + est_tokens(lines[j]) <= max_tokens):
            size += est_tokens(lines[j])
            seen.update(found[j])
            hits += len(found[j])
            j += 1
        if (len(seen), hits) > best:  # the most distinct terms first (query and short_query alike), then hits
            best, best_i, best_j = (len(seen), hits), i, j
    passage = "\n".join(lines[best_i:best_j])
    return _focus(passage, qk, max_tokens * 6)  # a single over-long line: cut by characters


def snippet(text: str, keys: set[str], max_tokens: int, chars: int) -> str:
    """A result's snippet: the best passage on one line, at most `chars` characters around its terms."""
    return _focus(" ".join(best_passage(text, "", max_tokens, keys).split()), keys, chars)


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


class RerankCandidates:
    """Model stage: score each query's top `rerank.top_n` candidates by their passage and blend (see above).

    Scores come from the rerank cache when present (read directly); the missing (query, intent, passage)
    pairs go to the reranker in one runner call per batch; new scores leave as `_new_rr` rows.
    """

    def __init__(self, cfg: Config, db: str, collection: str, runner: Runner | None = None):
        self.cfg = cfg
        self.runner = runner or Runner(cfg)
        col = Collection(db, collection, cfg)
        self.caches = Caches(col, "", cfg.models.embed_prompt, memory_rows=cfg.cache.memory_rows) \
            if cfg.cache.enabled else None
        self.model = model_id(cfg, "reranker")
        self.stats: dict[str, int] = {"pairs": 0, "cached": 0, "scored": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        rc = self.cfg.rerank
        rows = batch.select(["query", "intent", "error", "candidates"]).to_pylist()
        pairs: dict[tuple[str, str | None, str], int] = {}
        for i, r in enumerate(rows):
            if r["error"] is None:
                for c in r["candidates"] or []:
                    if c["_rank"] <= rc.top_n:
                        pairs.setdefault((r["query"], r["intent"], c["passage"]), i)
        scores = self.caches.get_rerank(self.model, list(pairs)) if self.caches and pairs else {}
        missing = [k for k in pairs if k not in scores]
        new_rows: list[list[dict]] = [[] for _ in rows]
        if missing:
            res = self.runner.map("reranker", pa.table({
                "query": [q for q, _, _ in missing], "intent": pa.array([i for _, i, _ in missing], pa.string()),
                "passage": [p for _, _, p in missing]}))
            new = dict(zip(missing, res["_rerank"].to_pylist()))
            scores.update(new)
            if self.caches:  # a failed pair (null score) is not cached: it is retried next time
                for k, v in new.items():
                    if v is not None:
                        new_rows[pairs[k]] += Caches.rerank_rows(self.model, {k: v})
        self.stats["pairs"] += len(pairs)
        self.stats["cached"] += len(pairs) - len(missing)
        self.stats["scored"] += len(missing)
        cands = [blend(r["candidates"] or [], scores, r["query"], r["intent"], self.cfg)
                 if r["error"] is None else None for r in rows]
        i = batch.schema.get_field_index("candidates")
        batch = batch.set_column(i, "candidates", pa.array(cands, pa.list_(CANDIDATE)))
        return batch.append_column(NEW_COLUMNS["rerank"], pa.array(new_rows, pa.list_(ROW_TYPES["rerank"])))
