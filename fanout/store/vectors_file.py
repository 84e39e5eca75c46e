"""Exact search's vectors (fanout/store/exact_vectors.py `Matrix`) as one file per chunks version, memory-mapped by
every process instead of each reading and normalising its own copy (176 MB at 60,000 x 768; on Ray Data one per
retrieval actor): the pages are shared through the page cache (docs/performance.md#query-cost-at-scale).

Where, naming, writing, checking and pruning: fanout/store/version_files.py (kind `exact`:
`<db>/<collection>_chunks.exact/<column>.v<version>.<fingerprint>.arrow`). The fingerprint covers the version, the
row count, the vector dimension and every fragment's data and deletion files. The record batch: `_rowid` (int64,
ascending), `damaged` (bool) and `vector` (fixed_size_list<float32>, unit length, damaged rows zero); the vectors
are used in place, so the search sees exactly the floats a load from Lance gives. Written by the first process that
loads the vectors from Lance and by `fanout index` / `fanout optimize`; writing one removes that column's files of
this and older versions.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from fanout.store import version_files

if TYPE_CHECKING:
    from lance import LanceDataset

log = logging.getLogger(__name__)
KIND = "exact"
FORMAT = 1


def folder(ds: LanceDataset) -> str | None:
    """`<table>.exact` next to a local table's `<table>.lance` folder; None on an object store."""
    return version_files.folder(ds, KIND)


def job_key(ds: LanceDataset) -> str:
    """The key of the background jobs that write the vectors files of the table `ds` (version_files.later)."""
    return f"{ds.uri}#{KIND}"


def older_versions(ds: LanceDataset, column: str) -> list[int]:
    """The versions older than `ds`'s with a vectors file of `column`, ascending."""
    return version_files.older_versions(ds, KIND, column)


def _fingerprint(ds: LanceDataset, column: str) -> str:
    frags = [(f.id, [d.path for d in f.data_files()], repr(f.deletion_file)) for f in
             (x.metadata for x in ds.get_fragments())]
    return version_files.fingerprint(FORMAT, {"column": column, "version": int(ds.version), "rows": ds.count_rows(),
                                              "dim": ds.schema.field(column).type.list_size, "fragments": frags})


def _schema(dim: int) -> pa.Schema:
    return pa.schema([("_rowid", pa.int64()), ("damaged", pa.bool_()), ("vector", pa.list_(pa.float32(), dim))])


def load(ds: LanceDataset, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(row ids, unit vectors (read-only, memory-mapped), damaged) of `column` at the version `ds` from its file;
    None when there is none for this version or it does not check out (a warning)."""
    try:
        fp = _fingerprint(ds, column)
        path = version_files.path(ds, KIND, column, fp)
    except Exception:  # noqa: BLE001  no file then: the caller reads Lance
        return None
    if path is None or not os.path.isfile(path):
        return None
    try:
        dim = ds.schema.field(column).type.list_size
        b = version_files.read(path, fp, _schema(dim))
        vec = b.column(2)
        if any(c.null_count for c in b.columns) or vec.offset or len(vec.values) != b.num_rows * dim:
            raise ValueError("null or offset arrays")
        ids, damaged = b.column(0).to_numpy(), b.column(1).to_numpy(zero_copy_only=False)
        vectors = vec.values.to_numpy().reshape(b.num_rows, dim)
        version_files.check_crc(path, b, lambda: _crc(ids, damaged, vectors))
        if b.num_rows != ds.count_rows() or (len(ids) > 1 and not (np.diff(ids) > 0).all()):
            raise ValueError("its row ids are not the version's, ascending")
    except Exception as e:  # noqa: BLE001  a bad file must never fail a search: Lance's vectors are read instead
        log.warning("exact-search vectors file %s is not used (%s); the vectors are read from the table and the "
                    "file rewritten", path, e)
        return None
    return ids, vectors, damaged


def _crc(ids: np.ndarray, damaged: np.ndarray, vectors: np.ndarray) -> str:
    # flat first: a view of no rows (every note deleted) has a 0 in its shape, which memoryview cannot cast
    return version_files.crc32([np.ascontiguousarray(a).reshape(-1).data.cast("B")
                                for a in (ids, damaged.astype(np.uint8), vectors)])


def save(ds: LanceDataset, column: str, ids: np.ndarray, vectors: np.ndarray, damaged: np.ndarray) -> str | None:
    """Write the vectors of `column` at the version `ds` (as `exact_vectors.matrix` made them), atomically, and
    remove the column's files of this and older versions. None on an object store; never raises (a warning)."""
    try:
        fp = _fingerprint(ds, column)
        path = version_files.path(ds, KIND, column, fp)
        if path is None:
            return None
        dim = vectors.shape[1]
        flat = pa.array(np.ascontiguousarray(vectors, np.float32).reshape(-1))
        b = pa.record_batch([pa.array(ids, pa.int64()), pa.array(damaged, pa.bool_()),
                             pa.FixedSizeListArray.from_arrays(flat, dim)], names=["_rowid", "damaged", "vector"])
        version_files.write(path, b, fp, _crc(ids, damaged, vectors))
        version_files.prune(ds, KIND, column, keep=os.path.basename(path))
        log.info("wrote the exact-search vectors of %s v%d to %s (%.0f MB)", column, int(ds.version), path,
                 os.path.getsize(path) / 1e6)
        return path
    except Exception as e:  # noqa: BLE001  the file only saves later processes a load
        log.warning("exact-search vectors of %s not written to a file (%s); each process loads them", column, e)
        return None
