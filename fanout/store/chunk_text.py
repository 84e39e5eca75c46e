"""Chunk rows by chunk id: the pinned chunks version's rows for a set of chunk ids without a filtered scan.

`fetch_chunks` (pipelines/lanes.py) used to read a query batch's result chunks with `chunk_id IN (...)`, a
scan of the whole chunks table per call (~1.4 ms of CPU a query at 60,000 chunks, docs/performance.md). Here
the ids go to row ids through a map built once per pinned version from the `path`/`chunk_id` columns the
full-text and vector paths already hold (`Collection.row_keys`), and the rows are read by row id (~0.11 ms a
row on an index of many fragments, as `fanout index` leaves it: 910 at 60,000 chunks; ~0.015 ms once
`fanout optimize` has merged them), and once those reads have cost what reading the text columns of the whole
table costs, the whole table's are kept (ski-rental, `rows_by_chunk_id`). Above `retrieve.rowid_map_rows`
(no map) the caller scans as before.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from fanout.store.chunk_rows import take_rows
from fanout.store.db import Collection

KEYS = ("path", "chunk_id")
# CPU to read one row's title/heading/text in a read of the whole table: 4.3 us (60,000 synthetic chunks in
# 910 fragments, 0.26 s); what `rows_by_chunk_id`'s ski-rental rule weighs the per-call reads against
READ_S_PER_ROW = 4e-6  # the columns `Collection.row_keys` is asked for elsewhere: one memo for all


def chunk_positions(col: Collection) -> tuple[dict[str, int], np.ndarray] | None:
    """(chunk_id -> position, sorted row ids) of the pinned chunks version, positions into `row_keys`'
    order (memo per version; None without `row_keys`)."""
    def build() -> tuple[dict[str, int], np.ndarray] | None:
        keys = col.row_keys(KEYS)
        if keys is None:
            return None
        return {c: i for i, c in enumerate(keys[1]["chunk_id"].to_pylist())}, keys[0]

    return col.memo("chunk_positions", build)


def rows_by_chunk_id(col: Collection, chunk_ids: list[str], columns: list[str]) -> list[dict] | None:
    """The rows (dicts of `columns`) of the chunks with these ids that exist in the pinned version, in row
    order; None when there is no row-id map (the caller scans).

    Read by row id, until the reads have cost `retrieve.text_memory_after` times what reading the columns
    of every row once would (the ski-rental rule, as for the full-text postings); then, on a table of at
    most `retrieve.text_memory_rows` rows, every row's `columns` are read once and kept for this version
    (`memory_bytes` says how much), and later calls take their rows from memory."""
    got = chunk_positions(col)
    if got is None:
        return None
    where, ids = got
    pos = np.array(sorted(where[c] for c in chunk_ids if c in where), np.int64)
    if not len(pos):
        return []
    r = col.cfg.retrieve if col.cfg is not None else None
    state = _state(col, columns)
    if state["table"] is None and r is not None and r.text_memory_rows and len(ids) <= r.text_memory_rows \
            and state["spent"] >= r.text_memory_after * READ_S_PER_ROW * len(ids):
        _read_whole(col, columns, ids, state)
    if state["table"] is not None:
        return state["table"].take(pa.array(pos)).to_pylist()
    t0 = time.process_time()
    with col.guard(col.chunks_name):
        out = take_rows(col.dataset(col.chunks_name), ids[pos], columns).to_pylist()
    state["spent"] += time.process_time() - t0
    return out


def _state(col: Collection, columns: list[str]) -> dict:
    return col.memo(("chunk_text", tuple(columns)), lambda: {"spent": 0.0, "table": None})


def _read_whole(col: Collection, columns: list[str], ids: np.ndarray, state: dict) -> None:
    """Every row's `columns` of the pinned version read once and kept in `state` (in `ids`' order)."""
    with col.guard(col.chunks_name):
        t = col.dataset(col.chunks_name).to_table(columns=columns, with_row_id=True)
    rid = t["_rowid"].to_numpy()
    if len(rid) == len(ids) and (np.diff(rid) > 0).all():  # read in row-id order (as Lance reads): no copy
        if np.array_equal(rid, ids):  # the same rows as the map (one version); one chunk per column:
            state["table"] = t.select(columns).combine_chunks()  # a take from 900 chunks costs 10x
    else:
        order = np.argsort(rid, kind="stable")
        if np.array_equal(rid[order], ids):
            state["table"] = t.select(columns).take(pa.array(order)).combine_chunks()


def held_in_memory(col: Collection) -> list[list[str]]:
    """The column sets `rows_by_chunk_id` reads from memory on `col`'s pinned version (read whole)."""
    return [list(k[1]) for k, v in list(col.derived.items())
            if isinstance(k, tuple) and k and k[0] == "chunk_text" and v["table"] is not None]


def read_whole(col: Collection, columns: list[str]) -> None:
    """Read now every row's `columns` of `col`'s pinned version, as `rows_by_chunk_id` does once their reads by
    row id have cost as much (a new version's Searchers, made ready before they serve: fanout/api/
    next_version.py, when the version before had come to it: the same rule would pay it again there)."""
    got = chunk_positions(col)
    state = _state(col, columns)
    if got is not None and state["table"] is None:
        _read_whole(col, columns, got[1], state)


def memory_bytes(col: Collection) -> int:
    """Bytes of chunk columns this collection keeps in memory for the pinned version (`rows_by_chunk_id`)."""
    return sum(v["table"].nbytes for k, v in col.derived.items()
               if isinstance(k, tuple) and k[0] == "chunk_text" and v["table"] is not None)
