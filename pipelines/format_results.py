"""Stage: ranked candidates -> each query's `results` (rank, path, title, heading, snippet, score; `_explain`
on request): the top `n` pages scoring at least `min_score`."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pyarrow as pa

from fanout.filters import describe
from fanout.schemas import PROBE_SEEN, RESULT, RESULT_SECTIONS


def format_results(cands: list[dict], n: int, min_score: float = 0.0, hits: list[dict] | None = None,
                   texts: dict[int, str] | None = None, query: dict | None = None,
                   sections: list[list[dict]] | None = None) -> list[dict]:
    """One query's result rows from its ranked candidates; `hits` (its lists' entries) adds `_explain`, with
    each list's variant text (`texts`: vid -> text) and the query-level facts in `query` (fanout/explain.py);
    `sections` (per candidate, pipelines/pick_sections.py) adds each page's `sections`."""
    explain: dict[str, list[dict]] = defaultdict(list)
    for h in hits or []:
        explain[h["path"]].append({"vid": h["vid"], "kind": h["kind"], "lane": h["lane"],
                                   "text": (texts or {}).get(h["vid"], ""), "rank": h["_rank"],
                                   "score": round(h["_score"], 4)})
    rows: list[dict[str, Any]] = []
    for i, c in enumerate(cands):
        if len(rows) >= n or c["score"] < min_score:
            continue
        rows.append({
            "rank": len(rows) + 1, "path": c["path"], "title": c["title"], "heading": c["heading"],
            "snippet": c["snippet"], "score": round(float(c["score"]), 4), "_rrf": c["_rrf"],
            "_rerank": c["_rerank"],
            "_explain": json.dumps({"lists": explain[c["path"]], "rrf": round(c["_rrf"], 5),
                                    "fused_rank": c["_rank"], "rerank": c["_rerank"], **(query or {})},
                                   ensure_ascii=False) if hits is not None else None,
        })
        if sections is not None:
            rows[-1]["sections"] = sections[i]
    return rows


class FormatResults:
    """Stage: `candidates` (+ `_hits`) -> `results`; drops the columns only the stages needed."""

    def __init__(self, n: int = 10, min_score: float = 0.0, explain: bool = False):
        self.n, self.min_score, self.explain = n, min_score, explain
        self.stats: dict[str, int] = {"queries": 0, "results": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        cands = batch.column("candidates").to_pylist()
        hits = batch.column("_hits").to_pylist() if self.explain and "_hits" in batch.column_names \
            else [None] * batch.num_rows
        texts, facts = self.query_facts(batch) if self.explain else ([None] * batch.num_rows,) * 2
        secs = batch.column("_sections").to_pylist() if "_sections" in batch.column_names \
            else [None] * batch.num_rows
        results = [format_results(c, self.n, self.min_score, h if self.explain else None, t, f, s)
                   if c is not None else [] for c, h, t, f, s in zip(cands, hits, texts, facts, secs)]
        self.stats["queries"] += sum(c is not None for c in cands)
        self.stats["results"] += sum(len(r) for r in results)
        kind = RESULT_SECTIONS if "_sections" in batch.column_names else RESULT
        batch = batch.append_column("results", pa.array(results, pa.list_(kind)))
        return batch.drop_columns([c for c in ("candidates", "_hits", "_sections", "skip_expansion", PROBE_SEEN)
                                   if c in batch.column_names])

    @staticmethod
    def query_facts(batch: pa.Table) -> tuple[list[dict[int, str]], list[dict]]:
        """Per query: vid -> variant text, and the query text, probe decision and filter for `_explain`."""
        n, cols = batch.num_rows, set(batch.column_names)

        def col(name: str) -> list:
            return batch.column(name).to_pylist() if name in cols else [None] * n

        texts = [{v["vid"]: v["text"] for v in vs or []} for vs in col("variants")]
        facts = []
        for q, seen, skip, src, filt in zip(col("query"), col(PROBE_SEEN), col("skip_expansion"),
                                            col("expansion"), col("filter")):
            probe = {**(seen or {}), "skip_expansion": bool(skip), "expansion": src} if seen or src else None
            facts.append({"query": q, "probe": probe, "filter": describe(json.loads(filt)) if filt else None})
        return texts, facts
