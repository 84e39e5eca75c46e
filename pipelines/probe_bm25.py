"""Stage: BM25 probe on the original query; skip expansion when the top page is clearly ahead.

qmd's rule on normalised scores x/(1+x): top >= min_top and top - second >= min_gap. Unlike qmd, the probe
also runs when an `intent` is given (qmd disables it then, so for agents it never fires). The probe's lists
are the original query's full-text lists, reused by retrieval (no second search).
"""

from __future__ import annotations

import pyarrow as pa

from fanout.config import Config
from fanout.db import Collection, tag_batch
from fanout.schemas import HITS, PAGE
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


class ProbeBM25:
    """Stage: + `_probe` (the original query's BM25 page list, reused by Retrieve) and `skip_expansion`."""

    def __init__(self, cfg: Config, db: str, collection: str):
        self.cfg = cfg
        self.col = Collection(db, collection, cfg)
        self.stats: dict[str, int] = {"queries": 0, "skip_expansion": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        batch = tag_batch(self.col, batch)  # one consistent index version for this batch's every stage
        ok = [i for i, e in enumerate(batch.column("error").to_pylist()) if e is None]
        texts = batch.column("query").to_pylist()
        lists = fts_page_lists(self.col, [texts[i] for i in ok], self.cfg) if ok else []
        probe: list[list[dict] | None] = [None] * batch.num_rows
        skip = [False] * batch.num_rows
        for i, pages in zip(ok, lists):
            probe[i] = pages
            skip[i] = self.cfg.probe.enabled and strong_signal(pages, self.cfg.probe.min_top, self.cfg.probe.min_gap)
        self.stats["queries"] += len(ok)
        self.stats["skip_expansion"] += sum(skip)
        batch = batch.append_column("_probe", pa.array(probe, pa.list_(PAGE)))
        return batch.append_column("skip_expansion", pa.array(skip, pa.bool_()))
