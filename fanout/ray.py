"""fanout as a Ray Data building block: `fanout.ray.search(ds, db=..., collection=..., config=...)`.

It adds fanout's stage list (parse, BM25 probe, expansion, per-variant retrieval, RRF, rerank, the cache
writer) to the caller's Dataset, lazily, with the pools `fanout batch` uses on Ray Data (each stage's
`map_batches` actor pool sized by its config section: `count`, `num_cpus`, `batch_size`, `instances`), on the
caller's Ray session or cluster (Ray is never started privately here; with no session yet, the plain local one
Ray Data itself would start). Nothing runs until the Dataset is consumed.

Output shape: one row per input row, the caller's columns untouched, plus `hits` (a list of pages: rank, path,
title, heading, snippet, score; with `sections=N` each hit's `sections` list too) and `error` / `error_field` (null unless the row was refused, e.g. an empty
query). One row per query rather than one per hit, so the caller's row count and keys survive: `.filter()`,
`.groupby()` and joins on their own columns work after the search as before it, and
`.flat_map(lambda r: [{**r, **h} for h in r["hits"]])` gives one row per hit when that is wanted.

    ds = ray.data.read_parquet("s3://lake/questions/")      # the caller's Dataset, on the caller's Ray
    import fanout.ray
    answers = fanout.ray.search(ds, db="s3://kb/db", collection="docs", config="production")
    answers.write_parquet("s3://lake/answers/")
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fanout.config import Config
from fanout.errors import UserError

if TYPE_CHECKING:
    from fanout.exec.ray_runner import Dataset  # ray.data.Dataset (a type only: the runner imports ray)


def search(ds: Dataset, *, db: str | os.PathLike, collection: str = "notes",
           config: str | os.PathLike | Config | None = None, query_column: str = "query",
           id_column: str | None = None, field_columns: Mapping[str, str] | None = None, n: int = 10,
           min_score: float = 0.0, filter: Mapping[str, Any] | str | None = None, expand: bool | None = None,
           rerank: bool | None = None, hits_column: str = "hits", error_column: str = "error",
           sections: int | None = None) -> Dataset:
    """`ds` (a ray.data.Dataset) with fanout's answer to each row added, lazily.

    `query_column`: the column holding the query text. The agent fields and a per-row filter are read from
    the columns of their names (`short_query`, `rephrased_query`, `expected_answer`, `intent`, `searches`,
    `queries`, `filter`) when present; `field_columns` maps a field to another column name
    ({"short_query": "keywords"}). `id_column`: a column of ids for error messages and the caches' logs
    (default: one made per row). `n`, `min_score`, `filter` (for every row), `expand`, `rerank`: as for
    `KnowledgeBase.search`. `sections`: each hit gains a `sections` list (its page's N best sections), still
    one row per input row. Raises a `FanoutError` at once for a missing index, a bad config or a column that
    is not there; a bad row becomes that row's `error`, never the job's.
    """
    from fanout.api.checks import check_count, check_flag, resolve_config
    from fanout.api.requests import check_collection, check_min_score, check_sections
    from fanout.api.types import as_path
    from fanout.exec.ray_runner import RayRunner
    from fanout.exec.runner import StageSpec
    from fanout.filters import as_option, parse_filter
    from fanout.pipelines.carry_rows import ROW_FIELDS, UnwrapAnswers, WrapRows
    from fanout.pipelines.search import Searcher, SearchOptions
    from fanout.store import storage

    if not (hasattr(ds, "map_batches") and hasattr(ds, "schema")):
        raise UserError(f"`ds` must be a ray.data.Dataset, got {type(ds).__name__}")
    db = storage.normalize_uri(as_path(db, "db"))
    collection = check_collection(collection)
    cfg = resolve_config(config)
    columns = {f: f for f in ROW_FIELDS} | {"query": query_column} | dict(field_columns or {})
    unknown = sorted(set(columns) - set(ROW_FIELDS))
    if unknown:
        raise UserError(f"`field_columns` names {unknown}, which are not row fields; allowed: {list(ROW_FIELDS)}")
    schema = ds.schema(fetch_if_missing=False)
    if schema is not None:
        names = list(schema.names)
        for what, col in (("query_column", query_column), ("id_column", id_column)):
            if col is not None and col not in names:
                raise UserError(f"`{what}` {col!r} is not a column of the Dataset; its columns: {names}")
        taken = [c for c in (hits_column, error_column, f"{error_column}_field") if c in names]
        if taken:
            raise UserError(f"the Dataset already has column(s) {taken}, which fanout would write; pass "
                            f"hits_column= / error_column= names that are free")
    opts = SearchOptions(n=check_count(n, "n"), min_score=check_min_score(min_score),
                         expand=check_flag(expand, "expand", none=True), rerank=check_flag(rerank, "rerank", none=True),
                         filter=as_option(parse_filter(filter)),
                         sections=check_sections(sections, cfg.retrieve.max_sections))
    runner = RayRunner(cfg, private=False)
    searcher = Searcher(db, collection, cfg, runner)  # checks the index (and its model) here, in the driver
    specs = [StageSpec(WrapRows, {"columns": columns, "id_column": id_column}), *searcher.stages(opts),
             StageSpec(UnwrapAnswers, {"hits_column": hits_column, "error_column": error_column})]
    return runner.dataset(specs, source=ds)
