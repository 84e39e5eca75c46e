"""Chunk rows by row id on a pinned Lance dataset: `take_rows` (the rows with these ids, in the order given) and
`sorted_row_ids` (a version's row ids, ascending, cached per version), and how one version's rows map to a later
one's (`moved_rows`, `row_steps`: what the postings, vectors and rows-key updates start from). What the chunk-id
map and the ski-rental read of whole columns build on: fanout/store/chunk_text.py.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa


def take_rows(ds, row_ids: np.ndarray, columns: list[str]) -> pa.Table:
    """`columns` of the rows of `ds` (a pinned Lance dataset) with these row ids, in the order given
    (duplicates allowed)."""
    if not len(row_ids):
        return ds.schema.empty_table().select(columns)
    uniq, inv = np.unique(np.asarray(row_ids, np.int64), return_inverse=True)
    got = ds._take_rows(pa.array(uniq, pa.uint64()), columns=columns)
    return got.take(pa.array(inv.reshape(-1)))


_ROW_IDS: dict[tuple, np.ndarray] = {}  # version_key -> that version's sorted row ids (the last few)
_ROW_IDS_LOCK = threading.Lock()


def sorted_row_ids(ds) -> np.ndarray:
    """The row ids of the Lance dataset `ds` (one version: they never change), ascending (uint64); kept for the
    last few versions this process asked for (an index round's files compare one version's with the next's)."""
    from fanout.store.version_files import version_key

    key = version_key(ds)
    with _ROW_IDS_LOCK:
        got = _ROW_IDS.get(key) if key is not None else None
    if got is None:
        got = np.sort(ds.to_table(columns=[], with_row_id=True)["_rowid"].to_numpy())
        got.setflags(write=False)
        if key is not None:
            with _ROW_IDS_LOCK:
                _ROW_IDS[key] = got
                while len(_ROW_IDS) > 4:
                    _ROW_IDS.pop(next(iter(_ROW_IDS)))
    return got


def moved_rows(old_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Each of the sorted row ids `old_ids`' position in the sorted row ids `ids` (int32; -1: not there)."""
    if not len(ids):
        return np.full(len(old_ids), -1, np.int32)
    at = np.minimum(np.searchsorted(ids, old_ids), len(ids) - 1)
    return np.where(ids[at] == old_ids, at, -1).astype(np.int32)


def row_steps(old_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From one version's sorted row ids `old_ids` to a later one's `ids`: (each old row's position now, -1 when
    gone: `moved_rows`; the positions in `ids` of the rows added since)."""
    step = moved_rows(old_ids, ids)
    found = np.zeros(len(ids), bool)
    found[step[step >= 0]] = True
    return step, np.flatnonzero(~found)
