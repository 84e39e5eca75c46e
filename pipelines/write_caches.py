"""Stage: the ONE cache writer. Commits the cache rows the workers returned (`_new_qvec`, `_new_exp`,
`_new_rr`), deduped by key, in one commit per table per batch, and drops those columns.

On Ray Data it is a single-actor stage at the end of the Dataset (or the end of the retrieval pool's chain when
that pool is one actor: see `writer_spec`); in the in-process loop it runs at the end of each batch. Workers only read the caches, so concurrent workers never insert the same key twice, and
`Caches.commit` locks each table so two jobs on one machine do not either.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from fanout.config import Config
from fanout.exec.runner import StageSpec
from fanout.store.caches import NEW_COLUMNS, SCHEMAS, Caches, qvec_table
from fanout.store.db import Collection

log = logging.getLogger(__name__)


def new_rows(batch: pa.Table, column: str) -> pa.Table | None:
    """The list<struct> column's rows as one flat table (None when absent or empty)."""
    if column not in batch.column_names:
        return None
    flat = pa.compute.list_flatten(batch.column(column))
    if len(flat) == 0:
        return None
    return pa.Table.from_struct_array(flat) if hasattr(pa.Table, "from_struct_array") else \
        pa.Table.from_batches([pa.RecordBatch.from_struct_array(flat.combine_chunks())])


class WriteCaches:
    """Stage: commit new cache rows; the batch leaves without the `_new_*` columns."""

    writes_db = True  # the start-of-job path check (fanout/exec/node_paths.py) wants its index writable where it runs

    def __init__(self, cfg: Config, db: str, collection: str):
        self.cfg = cfg
        self.caches = Caches(Collection(db, collection, cfg), "", cfg.models.embed_prompt) \
            if cfg.cache.enabled else None
        self.stats: dict[str, int] = {f"{name}_rows": 0 for name in NEW_COLUMNS} | \
            {f"{name}_inserted": 0 for name in NEW_COLUMNS}

    def __call__(self, batch: pa.Table) -> pa.Table:
        for name, column in NEW_COLUMNS.items():
            rows = new_rows(batch, column)
            if rows is None or self.caches is None:
                continue
            rows = qvec_table(rows) if name == "qvec" else rows.select(SCHEMAS[name].names).cast(SCHEMAS[name])
            self.stats[f"{name}_rows"] += rows.num_rows
            # the workers' rows are their lookups' misses: `missed` lets the writer append them
            self.stats[f"{name}_inserted"] += self.caches.commit(name, rows, self.cfg.cache.optimize_every, missed=True)
        return batch.drop_columns([c for c in NEW_COLUMNS.values() if c in batch.column_names])


def writer_spec(cfg: Config, ix: dict) -> StageSpec:
    """The cache writer's place in a stage list. Its own single-actor pool (`writer`) when the retrieval pool
    has several actors; otherwise it joins the retrieval pool's chain: with caches off it commits nothing, and
    with one retrieval actor (the default) that actor already is the one writer. On Ray Data that is one
    operator and one actor process fewer per job (~3 CPU-s and ~2.5 s of a job's start on 2 cores:
    bench/query_cost.py)."""
    if cfg.cache.enabled and cfg.retriever.count > 1:
        return StageSpec(WriteCaches, ix, pool="writer", single=True)
    return StageSpec(WriteCaches, ix)
