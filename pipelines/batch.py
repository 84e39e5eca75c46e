"""Pipeline: a query file -> a results file, in resumable parts.

Queries go through the search pipeline in slices; each finished slice is written as a parquet part (tmp +
rename) under `<out>.parts/`. A killed run (even kill -9) restarts, reads which query ids the parts hold,
and does only the rest; the final file is assembled in input order without duplicates, then the parts are
removed.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fanout.batch_io import FLAT, flat_rows, read_rows, write_table
from pipelines.search import Searcher, SearchOptions

log = logging.getLogger(__name__)


def parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def done_parts(pdir: Path) -> tuple[pa.Table, set[str]]:
    files = sorted(pdir.glob("part-*.parquet"))
    if not files:
        return FLAT.empty_table(), set()
    table = pa.concat_tables([pq.read_table(f, schema=FLAT) for f in files])
    return table, set(table["qid"].to_pylist())


def row_id(row: dict, n: int) -> str:
    rid = row.get("id", row.get("qid")) if isinstance(row, dict) else None
    return str(rid) if rid is not None and str(rid) != "" else f"row-{n}"


def run_batch(in_path: str | Path, out_path: str | Path, searcher: Searcher, opts: SearchOptions,
              slice_size: int = 64, on_slice: Callable[[int, int], None] | None = None) -> dict:
    """Answer every query of `in_path` into `out_path`; returns counters and stage timings."""
    out = Path(out_path)
    rows = read_rows(in_path)
    for n, r in enumerate(rows, 1):  # give id-less rows their stable positional id once
        if isinstance(r, dict) and row_id(r, n).startswith("row-"):
            r["id"] = f"row-{n}"
    ids = [row_id(r, n) for n, r in enumerate(rows, 1)]
    pdir = parts_dir(out)
    pdir.mkdir(parents=True, exist_ok=True)
    _, done = done_parts(pdir)
    todo = [r for r, i in zip(rows, ids) if i not in done]
    resumed = len(rows) - len(todo)
    if resumed:
        log.info("resuming: %d of %d queries already answered", resumed, len(rows))
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    start = len(list(pdir.glob("part-*.parquet")))
    for k, i in enumerate(range(0, len(todo), slice_size)):
        part = todo[i:i + slice_size]
        res = searcher.search(part, opts)
        for name, s in res.timings.items():
            timings[name] = timings.get(name, 0.0) + s
        tmp = pdir / f".part-{start + k:06d}.tmp"
        pq.write_table(flat_rows(res.results, res.errors), tmp)
        tmp.replace(pdir / f"part-{start + k:06d}.parquet")
        if on_slice:
            on_slice(min(i + slice_size, len(todo)), len(todo))
    table, _ = done_parts(pdir)
    write_table(table, out, order=list(dict.fromkeys(ids)))
    shutil.rmtree(pdir, ignore_errors=True)
    n_err = int(pa.compute.sum(pa.compute.is_valid(table["error"])).as_py() or 0)
    return {"queries": len(rows), "resumed": resumed, "errors": n_err,
            "seconds": time.perf_counter() - t0, "timings": timings}
