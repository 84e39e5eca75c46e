"""Job: precompute expansions of a query log into the cache (`fanout expand LOG`).

    ParseQueries -> LookupExpansions(generate) -> ExpandQueries -> LookupVectors -> EmbedVariants
    -> WriteCaches -> KeepColumns

The input is staged as a batch job stages it (positions, ids; under `<db>/.jobs/expand-<hash>/`, removed at
the end); queries already in the cache are found by LookupExpansions and never reach the expander; the one writer commits new expansions
batch by batch, so the cache itself is the resume state: a killed job, run again, generates only what is
still missing. EmbedVariants puts the variants' query vectors in their cache too (`expand.precompute_vectors`),
so a precomputed query is answered with no model call. On the Ray runner it is ONE Ray Data Dataset; the
driver only counts the small rows that come back (a bar on a TTY, a periodic log line otherwise).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from fanout.pipelines.batch import stage_input, write_todo
from fanout.pipelines.clean_fields import CleanFields
from fanout.pipelines.expand_queries import SOURCES, ExpandQueries, LookupExpansions
from fanout.pipelines.parse_queries import ParseQueries
from fanout.pipelines.retrieve_variants import EmbedVariants, LookupVectors
from fanout.pipelines.write_caches import writer_spec

from fanout.config import Config
from fanout.exec.progress import Progress
from fanout.exec.runner import Runner, StageSpec
from fanout.exec.stage_io import Source
from fanout.io.batch_input import filesystem
from fanout.models.identity import model_identity, model_key
from fanout.schemas import INPUT_ROWS
from fanout.store import storage

log = logging.getLogger(__name__)


class KeepColumns:
    """Stage: only the named columns go on (what the driver counts)."""

    def __init__(self, names: list[str]):
        self.names = names

    def __call__(self, batch: pa.Table) -> pa.Table:
        return batch.select([n for n in self.names if n in batch.column_names])


def expand_stages(cfg: Config, db: str, collection: str) -> list[StageSpec]:
    ix = {"cfg": cfg, "db": db, "collection": collection}
    sha = model_identity(cfg, "embedder")[1]  # the query-vector cache key, resolved once here in the driver
    writer = writer_spec(cfg, ix)
    return [
        StageSpec(ParseQueries, {"cfg": cfg}),
        # the cache and the prompt's inputs, in the CPU pool; the expander's identity resolved in the driver
        StageSpec(LookupExpansions, {**ix, "generate": True, "model": model_key(cfg, "expander")}),
        StageSpec(ExpandQueries, {"cfg": cfg}, pool="expander", role="expander"),
        # the vectors a search will look up are those of the variants as field hygiene leaves them
        *([StageSpec(CleanFields, ix)] if cfg.clean.enabled and cfg.expand.precompute_vectors else []),
        *([StageSpec(LookupVectors, {**ix, "embed_model": sha}),
           StageSpec(EmbedVariants, {"cfg": cfg, "embed_model": sha}, pool="embedder", role="embedder")]
          if cfg.expand.precompute_vectors else []),
        writer,
        StageSpec(KeepColumns, {"names": ["_row", "expansion", "error"]}, pool=writer.pool),
    ]


def run_expand(in_path: str | Path, db: str | Path, collection: str, cfg: Config, runner: Runner,
               progress: bool | None = None, on_batch: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Expand every query of `in_path` that the cache does not hold yet; returns counters."""
    db = storage.normalize_uri(db)
    fs, dbpath = filesystem(db, cfg.storage)
    key = hashlib.sha256(str(in_path).encode()).hexdigest()[:12]
    pdir = f"{dbpath}/.jobs/expand-{collection}-{key}"
    t0 = time.perf_counter()
    fs.delete_dir_contents(f"{pdir}/results", missing_dir_ok=True)
    try:
        with fs.open_input_stream(f"{pdir}/job.json"):
            pass
    except OSError:
        fs.delete_dir_contents(pdir, missing_dir_ok=True)
    try:
        stage_input(in_path, fs, pdir, cfg.storage)
    except ValueError:  # the log changed since a killed run: stage it again (the cache keeps what was done)
        fs.delete_dir_contents(pdir, missing_dir_ok=True)
        stage_input(in_path, fs, pdir, cfg.storage)
    files, todo = write_todo(fs, pdir)
    counts = {k: 0 for k in SOURCES} | {"errors": 0}
    bar = Progress("expand", "query", tty=progress)  # a bar on a TTY (None: when stderr is one), else lines
    done = 0
    specs = expand_stages(cfg, db, collection)

    def add(t: pa.Table) -> None:
        nonlocal done
        counts["errors"] += int(pc.sum(pc.is_valid(t["error"])).as_py() or 0)
        for r in pc.value_counts(t["expansion"].drop_null()).to_pylist() if t.num_rows else []:
            counts[r["values"]] += r["counts"]
        done += t.num_rows
        bar(done, todo)
        if on_batch:
            on_batch(done, todo)

    try:
        if todo:
            # model-bound: on Ray Data blocks of one expander batch, so progress moves per batch (Ray's per-block
            # cost is nothing next to the model's seconds per query); in the loop, slices of one batch per actor
            run = runner.run(specs, Source(files, fs, rows=todo, schema=INPUT_ROWS),
                             slice_rows=cfg.expander.batch_size * max(1, cfg.expander.count),
                             block_rows=cfg.expander.batch_size)
            for t in run:
                add(t)
    finally:
        bar.close()
    fs.delete_dir(pdir)
    return {"queries": todo, "expanded": counts["model"] + counts["fallback"], "cached": counts["cache"],
            "agent": counts["agent"], "errors": counts["errors"], "seconds": time.perf_counter() - t0,
            "sources": counts}
