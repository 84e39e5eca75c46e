"""Pipeline: a batch of queries -> ranked pages.

parse_queries -> probe_bm25 -> expand_queries -> retrieve_variants -> fuse_rrf -> rerank_candidates ->
format_results. The runner (in-process or Ray) only decides where the model actors live.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from actors._llama import file_sha256, model_path
from fanout.caches import Caches
from fanout.config import Config
from fanout.db import Collection
from fanout.integrity import IndexStateError
from fanout.runner import Runner
from pipelines.expand_queries import expand_queries
from pipelines.format_results import fetch_chunks, format_results
from pipelines.fuse_rrf import fuse_rrf, sent_lists
from pipelines.parse_queries import parse_queries
from pipelines.probe_bm25 import probe_bm25
from pipelines.rerank_candidates import best_passage, rerank_candidates
from pipelines.retrieve_variants import retrieve_variants

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchOptions:
    n: int = 10  # pages per query
    min_score: float = 0.0  # drop pages scoring below this
    expand: bool | None = None  # None = cfg.expand.enabled
    rerank: bool | None = None  # None = cfg.rerank.enabled
    explain: bool = False  # add every list's rank and score to each result


@dataclass
class SearchOutput:
    results: pa.Table
    errors: pa.Table
    variants: pa.Table
    timings: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


class Searcher:
    """Holds one collection, its caches and a runner; `search(rows)` answers a batch."""

    def __init__(self, db_dir: str | Path, collection: str, cfg: Config, runner: Runner):
        self.cfg = self.base_cfg = cfg
        self.col = Collection(db_dir, collection, cfg)
        path = model_path(cfg, "embedder")
        self.model_file, self.model_sha = path.name, file_sha256(path)
        self.check_index(self.col.require())
        self.runner = runner
        self.caches = Caches(self.col, self.model_sha, cfg.models.embed_prompt) if cfg.cache.enabled else None

    def check_index(self, manifest: dict) -> None:
        """The index must come from the configured embedder; its full-text languages win over the config's."""
        emb, cfg = manifest["embedder"], self.base_cfg
        if emb["sha256"] != self.model_sha or emb["prompt"] != cfg.models.embed_prompt:
            raise IndexStateError(
                f"index {self.col.name!r} was embedded with {emb['file']} ({emb['prompt']} prompt) but the config "
                f"names {self.model_file} ({cfg.models.embed_prompt}); re-run `fanout index` or use that model")
        langs = tuple(manifest["languages"])
        if langs != tuple(self.cfg.index.languages):
            if langs != tuple(cfg.index.languages):
                log.warning("index %r has full-text languages %s, the config says %s: searching the index's "
                            "(re-index to change them)", self.col.name, list(langs), list(cfg.index.languages))
            self.cfg = cfg.replace(index={"languages": langs})

    def refresh(self) -> None:
        """Start of every request: pin one consistent set of table versions (Collection.refresh) and re-check
        the manifest, so a long-lived Searcher never mixes two index runs."""
        self.check_index(self.col.refresh())

    def search(self, rows: list[dict] | pa.Table, opts: SearchOptions = SearchOptions()) -> SearchOutput:
        self.refresh()
        cfg, col, t = self.cfg, self.col, {}
        clock = time.perf_counter()

        def lap(name: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            t[name] = t.get(name, 0.0) + now - clock
            clock = now

        queries, errors = parse_queries(rows)
        lap("parse")
        qmap = {q["qid"]: q for q in queries.select(["qid", "query", "intent"]).to_pylist()}
        probe_hits, flags = probe_bm25(queries, col, cfg)
        skip = dict(zip(flags["qid"].to_pylist(), flags["skip_expansion"].to_pylist())) if flags.num_rows else {}
        lap("probe")
        variants, exp_stats = expand_queries(queries, skip, self.runner, cfg, self.caches, opts.expand)
        lap("expand")
        hits = retrieve_variants(variants, col, self.runner, cfg, self.caches, probe_hits)
        lap("retrieve")
        fused = fuse_rrf(hits, cfg.fuse, list(qmap), sent_lists(variants, cfg.retrieve.lanes))
        lap("fuse")
        rerank = cfg.rerank.enabled if opts.rerank is None else opts.rerank
        keep = max(opts.n, cfg.rerank.top_n if rerank else opts.n)
        fused = fused.filter(pa.compute.less_equal(fused["_rank"], keep))
        chunks = fetch_chunks(col, set(fused["chunk_id"].to_pylist()))
        lap("fetch")
        if rerank and fused.num_rows:
            passages = {}
            for r in fused.select(["qid", "path", "chunk_id"]).to_pylist():
                c = chunks.get(r["chunk_id"], {"text": "", "title": r["path"], "heading": ""})
                head = " > ".join(x for x in (c["title"], c["heading"]) if x)
                passages[(r["qid"], r["path"])] = head + "\n" + best_passage(
                    c["text"], qmap[r["qid"]]["query"], cfg.rerank.passage_tokens)
            ranked = rerank_candidates(fused, passages, qmap, self.runner, cfg, self.caches)
        else:
            ranked = fused.append_column("score", fused["_norm"])
        lap("rerank")
        results = format_results(ranked, chunks, qmap, opts.n, opts.min_score,
                                 hits if opts.explain else None)
        lap("format")
        stats = {"queries": queries.num_rows, "errors": errors.num_rows, "expansion": exp_stats,
                 "probe_skipped": int(sum(skip.values())),
                 "cache": self.caches.stats() if self.caches else {}}
        return SearchOutput(results, errors, variants, t, stats)
