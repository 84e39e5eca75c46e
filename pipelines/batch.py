"""Job: a query file -> a results file, resumable, streaming.

    check_out -> stage the input (`OUT.parts/input/`: positions, ids, rows as JSON; duplicate ids marked by
    one duckdb pass) -> todo = staged rows whose `_row` no part holds yet -> the search stages, either
    in-process (a loop over slices, each written as a part: tmp + rename) or as ONE Ray Data Dataset
    (the todo rows -> map_batches per stage, the last operator's actors writing the parts), one
    `runner.run(..., parts=)` either way
    -> the parts streamed into OUT in input order (duckdb over a pyarrow dataset) -> `OUT.parts/` removed.

Resume (kill -9, then the same command): a done-row filter on our own parts, not Ray Data checkpointing
(docs/architecture.md says why). A part is one parquet file, complete or unreadable (no footer); unreadable
ones are deleted and their rows redone. Memory stays flat: the driver never holds the input, the ids or the
results as Python lists; counting and ordering are columnar passes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from fanout.pipelines.search import Searcher, SearchOptions
from fanout.pipelines.write_explained import write_explained

from fanout.errors import UserError
from fanout.exec.stage_io import Parts, Source
from fanout.io.batch_input import filesystem, read_input
from fanout.io.batch_output import arrow_reader, check_out, parts_dataset, write_results
from fanout.schemas import ANSWERS, ANSWERS_SECTIONS, INPUT_ROWS
from fanout.store.db import index_stamp

if TYPE_CHECKING:
    import pyarrow.dataset as pads

    from fanout.config import StorageConfig

log = logging.getLogger(__name__)
TODO_FILE_ROWS = 1024  # rows per todo file (Ray Data reads one file per task)


def parts_dir(out: str | Path) -> str:
    return str(out) + ".parts"


def _input_identity(fs: pafs.FileSystem, path: str) -> dict[str, Any]:
    info = fs.get_file_info(path)
    return {"path": path, "size": info.size, "mtime": info.mtime.timestamp() if info.mtime else None}


def stage_input(in_uri: str | Path, fs: pafs.FileSystem, pdir: str,
                storage_cfg: StorageConfig | None = None) -> int:
    """Write the input as INPUT_ROWS parquet under `pdir/input/` once (reused on resume); returns rows.

    A staged input made from a different file (size or mtime changed) is an error: the positions would
    not match the parts.
    """
    ifs, ipath = filesystem(in_uri, storage_cfg)
    ident = _input_identity(ifs, ipath)
    meta = f"{pdir}/job.json"
    if fs.get_file_info(meta).type == pafs.FileType.File:
        with fs.open_input_stream(meta) as f:
            try:
                old = json.loads(f.read().decode())
            except ValueError:  # cut short (a full disk while staging): stage again
                old = {"input": ident}
        if not isinstance(old, dict):
            old = {"input": ident}
        if old.get("input") != ident:
            raise UserError(f"{pdir!r} holds the parts of another input ({old.get('input', {}).get('path')}, "
                            f"changed since); delete that folder to start over, or restore the input")
        if old.get("staged") is not None:
            return int(old["staged"])
    fs.create_dir(f"{pdir}/input", recursive=True)
    for f in Parts(fs, f"{pdir}/input").files():
        fs.delete_file(f)
    n = 0
    for k, table in enumerate(read_input(in_uri, storage_cfg)):
        pq.write_table(table, f"{pdir}/input/chunk-{k:06d}.parquet", filesystem=fs)
        n += table.num_rows
    tmp = f"{pdir}/.job.json.tmp"
    try:
        with fs.open_output_stream(tmp) as f:
            f.write(json.dumps({"input": ident, "staged": n}).encode())
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise
    fs.move(tmp, meta)  # whole or absent: a cut-short job.json would stop every resume
    return n


def drop_broken_parts(fs: pafs.FileSystem, rdir: str) -> int:
    """Delete result parts that do not read (a write cut by kill -9); their rows are redone."""
    bad = 0
    for f in Parts(fs, rdir).files():
        try:
            with fs.open_input_file(f) as fh:
                pq.read_metadata(fh)
        except Exception:  # noqa: BLE001 - truncated, empty or foreign: redo its rows
            fs.delete_file(f)
            bad += 1
    for info in fs.get_file_info(pafs.FileSelector(rdir, allow_not_found=True, recursive=True)):
        if info.type == pafs.FileType.File and not info.path.endswith(".parquet"):
            fs.delete_file(info.path)  # our own .tmp files of an interrupted in-process write
    return bad


def write_todo(fs: pafs.FileSystem, pdir: str) -> tuple[list[str], int]:
    """The staged rows no part holds yet, with `_dup` set for a repeated id (first row kept), as parquet
    files of TODO_FILE_ROWS under `pdir/todo/`; returns (files, rows). One duckdb pass, no Python lists."""
    import duckdb
    import pyarrow.dataset as pads

    tdir = f"{pdir}/todo"
    fs.delete_dir_contents(tdir, missing_dir_ok=True)
    fs.create_dir(tdir, recursive=True)
    con = duckdb.connect()
    con.register("staged", pads.dataset(Parts(fs, f"{pdir}/input").files(), schema=INPUT_ROWS, filesystem=fs,
                                        format="parquet"))
    done = Parts(fs, f"{pdir}/results").files()
    con.register("done", pads.dataset(done, schema=ANSWERS, filesystem=fs, format="parquet") if done
                 else pa.table({"_row": pa.array([], pa.int64())}))
    reader = arrow_reader(con, ("""
        select s._row, s.id, s.raw, s._error, case when d.first_row <> s._row then d.first_row end as _dup
        from staged s
        left join (select id, min(_row) as first_row from staged group by id having count(*) > 1) d using (id)
        where s._row not in (select _row from done)
        order by s._row"""), TODO_FILE_ROWS)
    files: list[str] = []
    buf: list[pa.Table] = []
    n = 0
    rows_in_buf = 0

    def flush() -> None:
        nonlocal buf, rows_in_buf
        if rows_in_buf:
            t = pa.Table.from_batches(buf).cast(INPUT_ROWS)
            path = f"{tdir}/todo-{len(files):06d}.parquet"
            pq.write_table(t, path, filesystem=fs)
            files.append(path)
        buf, rows_in_buf = [], 0

    for batch in reader:
        buf.append(batch)
        rows_in_buf += batch.num_rows
        n += batch.num_rows
        if rows_in_buf >= TODO_FILE_ROWS:
            flush()
    flush()
    con.close()
    return files, n


def job_stats(parts: pads.Dataset) -> dict[str, Any]:
    """How the answered queries were expanded, counted over the parts (columnar)."""
    import duckdb

    con = duckdb.connect()
    con.register("parts", parts)
    exp = dict(con.execute("select expansion, count(*) from parts where expansion is not null "
                           "group by 1").fetchall())
    con.close()
    return {"expansion": exp, "cached_expansions": int(exp.get("cache", 0))}


def run_batch(in_path: str | Path, out_path: str | Path, searcher: Searcher, opts: SearchOptions,
              slice_size: int | None = None, on_slice: Callable[[int, int], None] | None = None,
              progress: bool = False) -> dict:
    """Answer every query of `in_path` into `out_path`; returns counters and stage timings.

    The searcher's runner runs it (`runner.run`, one interface): in-process, a loop over slices with the
    searcher's built stages; on Ray, ONE Ray Data Dataset whose last operator's actors write the parts.
    """
    cfg, runner = searcher.cfg, searcher.runner
    check_out(out_path, in_path, cfg.storage)
    stamp = index_stamp(searcher.col.name, searcher.col.require())  # the index at the job's start
    slice_size = slice_size or cfg.runner.slice_rows
    fs, out = filesystem(out_path, cfg.storage)
    pdir = parts_dir(out)
    rdir = f"{pdir}/results"
    t0 = time.perf_counter()
    total = stage_input(in_path, fs, pdir, cfg.storage)
    fs.create_dir(rdir, recursive=True)
    broken = drop_broken_parts(fs, rdir)
    if broken:
        log.info("%d unreadable parts removed (their rows are redone)", broken)
    files, todo = write_todo(fs, pdir)
    resumed = total - todo
    if resumed:
        log.info("resuming: %d of %d queries already answered", resumed, total)
    timings: dict[str, float] = {}
    counters: dict[str, dict[str, int]] = {}
    if todo:
        # one interface for every runner: it writes the answered rows as parts (the loop from the
        # driver, whole or absent; Ray Data from its last operator's actors) and reports progress per step or block
        source = Source(files, fs, rows=todo, schema=INPUT_ROWS)
        if on_slice:
            on_slice(0, todo)  # off a TTY the reporter's timer starts now (the first step loads the models)
        answers = ANSWERS_SECTIONS if opts.sections else ANSWERS  # --sections: each result's `sections` list
        run = runner.run(searcher.stages(opts), source, parts=Parts(fs, rdir, answers),
                         pipeline=lambda: searcher.pipeline(opts), slice_rows=slice_size,
                         progress=progress and not on_slice,  # one bar: ours when someone reports progress
                         on_rows=(lambda k: on_slice(min(k, todo), todo)) if on_slice else None)
        for _ in run:
            pass
        timings, counters = dict(run.stats.seconds), run.stats.counters
    parts = parts_dataset(fs, rdir, ANSWERS_SECTIONS if opts.sections else ANSWERS)
    if opts.explain:
        counts = write_explained(parts, out_path, cfg.storage, index=stamp)
    else:
        counts = write_results(parts, out_path, cfg.storage, index=stamp, sections=opts.sections > 0)
    st = job_stats(parts)
    fs.delete_dir(pdir)
    return {"queries": counts["queries"], "resumed": resumed, "errors": counts["errors"], "runner": runner.kind,
            "seconds": time.perf_counter() - t0, "timings": timings, "stages": counters, **st}

