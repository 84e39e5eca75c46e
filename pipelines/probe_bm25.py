"""Stage: BM25 probe on the original query; skip expansion when the top page is clearly ahead.

qmd's rule on normalised scores x/(1+x): top >= min_top and top - second >= min_gap. Unlike qmd, the probe
also runs when an `intent` is given (qmd disables it then, so for agents it never fires). The probe's lists
are the original query's full-text lists, reused by retrieval (no second search).
"""

from __future__ import annotations

import pyarrow as pa

from fanout.config import Config
from fanout.db import Collection
from fanout.schemas import HITS
from pipelines.retrieve_variants import fts_page_lists, hit_rows


def normalise(score: float) -> float:
    return abs(score) / (1.0 + abs(score))


def strong_signal(pages: list[dict], min_top: float, min_gap: float) -> bool:
    """True when the first page's normalised BM25 score is high and clearly ahead of the second."""
    if not pages:
        return False
    top = normalise(pages[0]["_score"])
    second = normalise(pages[1]["_score"]) if len(pages) > 1 else 0.0
    return top >= min_top and top - second >= min_gap


def probe_bm25(queries: pa.Table, col: Collection, cfg: Config) -> tuple[pa.Table, pa.Table]:
    """QUERIES -> (HITS of the original queries' BM25 lists, table qid/skip_expansion/top/gap)."""
    qids = queries["qid"].to_pylist()
    texts = queries["query"].to_pylist()
    lists = fts_page_lists(col, texts, cfg)
    hits: list[dict] = []
    flags = []
    for qid, pages in zip(qids, lists):
        hits.extend(hit_rows(qid, 0, "orig", "fts", pages))
        top = normalise(pages[0]["_score"]) if pages else 0.0
        second = normalise(pages[1]["_score"]) if len(pages) > 1 else 0.0
        skip = cfg.probe.enabled and strong_signal(pages, cfg.probe.min_top, cfg.probe.min_gap)
        flags.append({"qid": qid, "skip_expansion": skip, "top": top, "gap": top - second})
    return pa.Table.from_pylist(hits, schema=HITS), pa.Table.from_pylist(flags)
