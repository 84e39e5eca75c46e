"""Composition: a batch of queries -> ranked pages, as an ordered list of stages (data, not logic).

    ParseQueries -> ProbeBM25 -> LookupExpansions [-> ExpandQueries] [-> CleanFields] -> LookupVectors
    -> EmbedVariants -> Retrieve [-> LookupRerank -> RerankCandidates] -> FormatResults
    -> WriteCaches

Model stages (ExpandQueries, EmbedVariants, RerankCandidates) hold only their model: the caches and the index
are read by the CPU stage before each (Lookup*), which hands over the rows that missed.

One row per query flows through; nested columns carry what the next stage needs (variants, vectors,
candidates, results; new cache rows for the one writer). `Searcher.search(rows)` runs the list with the
in-process loop (`Runner.pipeline`); a batch job hands the same list to Ray Data (`RayRunner.dataset`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from fanout.pipelines.clean_fields import CleanFields
from fanout.pipelines.expand_queries import SOURCES, ExpandQueries, LookupExpansions
from fanout.pipelines.format_results import FormatResults
from fanout.pipelines.parse_queries import ParseQueries
from fanout.pipelines.pick_sections import PickSections
from fanout.pipelines.probe_bm25 import ProbeBM25
from fanout.pipelines.rerank_candidates import LookupRerank, RerankCandidates
from fanout.pipelines.retrieve_variants import EmbedVariants, LookupVectors, Retrieve
from fanout.pipelines.write_caches import writer_spec

from fanout.config import Config
from fanout.exec.runner import Pipeline, Runner, StageSpec
from fanout.io.batch_input import rows_table
from fanout.models.identity import model_identity, model_key
from fanout.schemas import ERRORS, RESULTS, RESULTS_SECTIONS, VARIANTS
from fanout.store.db import Collection
from fanout.store.integrity import IndexStateError

log = logging.getLogger(__name__)

MAX_PIPELINES = 32  # option sets (n, filter, explain, ...) a long-lived Searcher keeps built, least recent dropped


@dataclass(frozen=True)
class SearchOptions:
    n: int = 10  # pages per query
    min_score: float = 0.0  # drop pages scoring below this
    expand: bool | None = None  # generate missing expansions? None = cfg.expand.enabled (cached ones: always)
    rerank: bool | None = None  # None = cfg.rerank.enabled
    explain: bool = False  # add every list's rank and score to each result
    # a filter for every row, as ((kind, (values...)), ...) (fanout/filters.py); a row's own `filter` also applies
    filter: tuple[tuple[str, tuple[str, ...]], ...] = ()
    sections: int = 0  # the best sections of each page to add (0: none, no extra work; pipelines/pick_sections.py)


@dataclass
class SearchOutput:
    results: pa.Table
    errors: pa.Table
    variants: pa.Table
    timings: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


def search_stages(cfg: Config, db: str | Path, collection: str, opts: SearchOptions = SearchOptions()
                  ) -> list[StageSpec]:
    """The query pipeline for these options. Model stages name their role; the rest run in the retrieval
    pool (cfg.retriever) and the cache writer in a single actor (cfg.writer)."""
    rerank = cfg.rerank.enabled if opts.rerank is None else opts.rerank
    expand = cfg.expand.enabled if opts.expand is None else opts.expand
    keep = max(opts.n, cfg.rerank.top_n if rerank else opts.n)
    db = str(db) if "://" in str(db) else str(Path(db).resolve())
    ix = {"cfg": cfg, "db": db, "collection": collection}
    sha = model_identity(cfg, "embedder")[1]  # the query-vector cache key, resolved once here in the driver
    specs = [
        StageSpec(ParseQueries, {"cfg": cfg, "filter": opts.filter}),
        StageSpec(ProbeBM25, ix),
        # model identities (cache keys) are resolved here, in the driver, so a CPU node never needs a model file
        StageSpec(LookupExpansions, {**ix, "generate": expand, "model": model_key(cfg, "expander", expand) or ""}),
    ]
    if expand:  # generate the expansions the cache misses: the only stage that needs the expander
        specs.append(StageSpec(ExpandQueries, {"cfg": cfg}, pool="expander", role="expander"))
    if cfg.clean.enabled:  # field hygiene (pipelines/clean_fields.py) over every variant source
        specs.append(StageSpec(CleanFields, ix))
    specs += [
        # the cache is read in the CPU pool (the model pool holds only the model); the embedder's identity is
        # resolved here, in the driver, so a CPU node never needs the model file
        StageSpec(LookupVectors, {**ix, "embed_model": sha}),
        StageSpec(EmbedVariants, {"cfg": cfg, "embed_model": sha}, pool="embedder", role="embedder"),
    ]
    specs += [
        # `_hits` (every list's entries) is kept for --explain and for --sections (each list's chunk per page)
        StageSpec(Retrieve, {**ix, "keep": keep, "rerank": rerank, "explain": opts.explain or opts.sections > 0}),
    ]
    if rerank:
        specs += [StageSpec(LookupRerank, {**ix, "model": model_key(cfg, "reranker")}),
                  StageSpec(RerankCandidates, {"cfg": cfg}, pool="reranker", role="reranker")]
    if opts.sections > 0:
        specs.append(StageSpec(PickSections, {**ix, "sections": opts.sections, "n": opts.n,
                                              "min_score": opts.min_score}))
    specs += [
        StageSpec(FormatResults, {"n": opts.n, "min_score": opts.min_score, "explain": opts.explain}),
        writer_spec(cfg, ix),  # the one cache writer: its own actor, or the end of a one-actor retrieval chain
    ]
    return specs


def check_index_embedder(col: Collection, cfg: Config) -> dict[str, Any]:
    """The index's manifest, after checking that it was embedded with the configured model and prompt."""
    manifest = col.require()
    emb = manifest.get("embedder", {})
    name, sha = model_identity(cfg, "embedder")
    if emb.get("sha256") != sha and emb.get("file") == name and cfg.served("embedder") is not None:
        raise IndexStateError(
            f"index {col.name!r} was embedded through {name}, but that server's vectors for fanout's probe texts "
            f"now differ (fingerprint {str(emb.get('sha256'))[:12]} then, {sha[:12]} now): another model or other "
            f"weights answer under that name. Re-run `fanout index` to re-embed with it, or point "
            f"models.embedder at the server and model the index was built with")
    if emb.get("sha256") != sha or emb.get("prompt") != cfg.models.embed_prompt:
        raise IndexStateError(
            f"index {col.name!r} was embedded with {emb.get('file')} ({emb.get('prompt')} prompt) but the "
            f"config names {name} ({cfg.models.embed_prompt}); re-run `fanout index` or use that model")
    return manifest


def flatten(answers: pa.Table, column: str, schema: pa.Schema) -> pa.Table:
    """A list<struct> column of the per-query rows as a flat table with the query's `qid` in front."""
    lists = answers.column(column)
    flat = pc.list_flatten(lists)
    if len(flat) == 0:
        return schema.empty_table()
    qid = answers.column("qid").take(pc.list_parent_indices(lists))
    cols = {"qid": qid}
    flat = flat.combine_chunks() if isinstance(flat, pa.ChunkedArray) else flat
    for f in schema:
        if f.name != "qid":
            cols[f.name] = flat.field(f.name)
    return pa.table(cols).cast(schema)


def output(answers: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(RESULTS, ERRORS, VARIANTS) from the per-query rows the pipeline leaves."""
    bad = answers.filter(pc.is_valid(answers["error"]))
    errors = pa.table({"qid": bad["qid"], "field": pc.fill_null(bad["field"], ""), "error": bad["error"]},
                      schema=ERRORS)
    sections = pa.types.is_list(answers.schema.field("results").type) and \
        answers.schema.field("results").type.value_type.get_field_index("sections") >= 0
    return (flatten(answers, "results", RESULTS_SECTIONS if sections else RESULTS), errors,
            flatten(answers, "variants", VARIANTS))


def answer_stats(answers: pa.Table) -> dict[str, Any]:
    """Counters read off the per-query rows (the same columnar pass serves a whole job's parts)."""
    exp = {k: 0 for k in SOURCES}
    for r in pc.value_counts(answers["expansion"].drop_null()).to_pylist() if answers.num_rows else []:
        exp[r["values"]] = r["counts"]
    n_err = int(pc.sum(pc.is_valid(answers["error"])).as_py() or 0)
    return {"queries": answers.num_rows - n_err, "errors": n_err, "expansion": exp,
            "probe_skipped": exp["probe_skip"], "cached_expansions": exp["cache"]}


class Searcher:
    """Holds one collection, a runner and the stage list per options; `search(rows)` answers a batch."""

    def __init__(self, db_dir: str | Path, collection: str, cfg: Config, runner: Runner):
        self.cfg = self.base_cfg = cfg
        self.db = db_dir
        self.collection = collection
        self.col = Collection(str(db_dir), collection, cfg)
        self.runner = runner
        self._pipes: dict[SearchOptions, Pipeline] = {}
        self._stages: dict = {}  # stage instances by (class, kwargs), shared by the pipelines of other options
        self.refresh()

    def refresh(self) -> None:
        """Pin the manifest's table versions (Collection.refresh) and re-check it: the index must come from
        the configured embedder, and its full-text languages win over the config's (a warning says so).
        Each batch's first index stage pins again (db.tag_batch), so a long-lived Searcher (MCP, serve)
        never mixes two index runs within a request."""
        self.manifest = check_index_embedder(self.col, self.base_cfg)
        self.col.refresh()
        langs, cfg = tuple(self.manifest["languages"]), self.base_cfg
        want = cfg if langs == tuple(cfg.index.languages) else cfg.replace(index={"languages": langs})
        if want != self.cfg:
            if langs != tuple(cfg.index.languages):
                log.warning("index %r has full-text languages %s, the config says %s: searching the index's "
                            "(re-index to change them)", self.col.name, list(langs), list(cfg.index.languages))
            self.cfg, self._pipes, self._stages = want, {}, {}

    def stages(self, opts: SearchOptions = SearchOptions()) -> list[StageSpec]:
        return search_stages(self.cfg, self.db, self.collection, opts)

    def pipeline(self, opts: SearchOptions = SearchOptions()) -> Pipeline:
        """The in-process executor for these options, built once (stages open the collection once)."""
        if opts in self._pipes:
            self._pipes[opts] = self._pipes.pop(opts)  # most recently used last
        else:
            self._pipes[opts] = self.runner.pipeline(self.stages(opts), self._stages)
            while len(self._pipes) > MAX_PIPELINES:  # per-request filters must not grow a server without end
                self._pipes.pop(next(iter(self._pipes)))
            live = {id(st) for p in self._pipes.values() for st in p.stages}
            for key in [k for k, st in self._stages.items() if id(st) not in live]:
                del self._stages[key]
        return self._pipes[opts]

    def built_options(self) -> list[SearchOptions]:
        """The options its pipelines are built for (least recently used first)."""
        return list(self._pipes)

    def stage_instances(self) -> dict:
        """Its stage instances by (class, kwargs), shared by its pipelines (a copy)."""
        return dict(self._stages)

    def cache_stats(self) -> dict[str, dict[str, int]]:
        hits: dict[str, int] = {}
        misses: dict[str, int] = {}
        for stage in {id(st): st for p in self._pipes.values() for st in p.stages}.values():  # shared: once
            c = getattr(stage, "caches", None)
            for src, dst in ((getattr(c, "hits", {}), hits), (getattr(c, "misses", {}), misses)):
                for k, v in src.items():
                    dst[k] = dst.get(k, 0) + v
        return {"hits": hits, "misses": misses}

    def search(self, rows: list[dict] | pa.Table, opts: SearchOptions = SearchOptions()) -> SearchOutput:
        pipe = self.pipeline(opts)
        table = rows if isinstance(rows, pa.Table) and "raw" in rows.column_names else rows_table(rows)
        before = dict(pipe.seconds)
        answers = pipe(table)
        timings = {k: v - before.get(k, 0.0) for k, v in pipe.seconds.items()}
        results, errors, variants = output(answers)
        stats = {**answer_stats(answers), "cache": self.cache_stats(), "stages": pipe.stats()}
        return SearchOutput(results, errors, variants, timings, stats)
