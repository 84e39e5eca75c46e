"""Exact search's vectors (fanout/store/exact_vectors.py `Matrix`) as one file per chunks version, memory-mapped by
every process instead of each reading and normalising its own copy (176 MB at 60,000 x 768; on Ray Data one per
retrieval actor): the pages are shared through the page cache (docs/performance.md#query-cost-at-scale).

Where: `<db>/<collection>_chunks.exact/<column>.v<version>.<fingerprint>.arrow`, local databases only (on an object
store each process loads its copy, as without it). The fingerprint covers the version, the row count, the vector
dimension and every fragment's data and deletion files (their names are unique: a table dropped and made anew
never matches an old file). Format: an Arrow IPC file, one record batch: `_rowid` (int64, ascending), `damaged`
(bool) and `vector` (fixed_size_list<float32>, unit length, damaged rows zero), with a CRC-32 of the arrays in
its metadata; the vectors are used in place (zero copy), so the search sees exactly the floats a load from Lance
gives. A file that does not check out is ignored with a warning and rewritten. Written atomically (a temporary
file, then a rename) by the first process that loads the vectors from Lance and by `fanout index` / `fanout
optimize`; writing one removes that column's files of this and older versions.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from typing import Any

import numpy as np
import pyarrow as pa

from fanout.store import version_files

log = logging.getLogger(__name__)
FORMAT = 1
NAME = re.compile(r"^(?P<column>[A-Za-z0-9_]+)\.v(?P<version>\d+)\.(?P<fp>[0-9a-f]{16})\.arrow$")


def folder(ds: Any) -> str | None:
    """`<table>.exact` next to a local table's `<table>.lance` folder; None on an object store."""
    uri = str(ds.uri).removeprefix("file://")
    if "://" in uri or not uri.rstrip("/").endswith(".lance"):
        return None
    return uri.rstrip("/")[:-len(".lance")] + ".exact"


def _fingerprint(ds: Any, column: str) -> str:
    frags = [(f.id, [d.path for d in f.data_files()], repr(f.deletion_file)) for f in
             (x.metadata for x in ds.get_fragments())]
    key = {"format": FORMAT, "column": column, "version": int(ds.version), "rows": ds.count_rows(),
           "dim": ds.schema.field(column).type.list_size, "fragments": frags}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _path(ds: Any, column: str, fp: str) -> str | None:
    d = folder(ds)
    if d is None or not re.fullmatch(r"[A-Za-z0-9_]+", column):
        return None
    return os.path.join(d, f"{column}.v{int(ds.version)}.{fp[:16]}.arrow")


def load(ds: Any, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(row ids, unit vectors (read-only, memory-mapped), damaged) of `column` at the version `ds` from its file;
    None when there is none for this version or it does not check out (a warning)."""
    try:
        fp = _fingerprint(ds, column)
        path = _path(ds, column, fp)
    except Exception:  # noqa: BLE001  no file then: the caller reads Lance
        return None
    if path is None or not os.path.isfile(path):
        return None
    try:
        reader = pa.ipc.open_file(pa.memory_map(path))  # the arrays keep the map open
        if reader.num_record_batches != 1:
            raise ValueError(f"{reader.num_record_batches} record batches, expected 1")
        b = reader.get_batch(0)
        meta = b.schema.metadata or {}
        if meta.get(b"fanout.fingerprint", b"").decode() != fp:
            raise ValueError("its recorded fingerprint differs from its name")
        dim = ds.schema.field(column).type.list_size
        want = pa.schema([("_rowid", pa.int64()), ("damaged", pa.bool_()), ("vector", pa.list_(pa.float32(), dim))])
        if not b.schema.remove_metadata().equals(want):
            raise ValueError(f"schema {b.schema.remove_metadata()} is not {want}")
        vec = b.column(2)
        if any(c.null_count for c in b.columns) or vec.offset or len(vec.values) != b.num_rows * dim:
            raise ValueError("null or offset arrays")
        ids, damaged = b.column(0).to_numpy(), b.column(1).to_numpy(zero_copy_only=False)
        vectors = vec.values.to_numpy().reshape(b.num_rows, dim)
        if not version_files.written_here(path) and meta.get(b"fanout.crc", b"").decode() != _crc(ids, damaged, vectors):
            raise ValueError("a checksum differs (the file was changed or is damaged)")
        if b.num_rows != ds.count_rows() or (len(ids) > 1 and not (np.diff(ids) > 0).all()):
            raise ValueError("its row ids are not the version's, ascending")
    except Exception as e:  # noqa: BLE001  a bad file must never fail a search: Lance's vectors are read instead
        log.warning("exact-search vectors file %s is not used (%s); the vectors are read from the table and the "
                    "file rewritten", path, e)
        return None
    return ids, vectors, damaged


def _crc(ids: np.ndarray, damaged: np.ndarray, vectors: np.ndarray) -> str:
    # flat first: a view of no rows (every note deleted) has a 0 in its shape, which memoryview cannot cast
    return version_files.crc32([memoryview(np.ascontiguousarray(a).reshape(-1)).cast("B")
                                for a in (ids, damaged.astype(np.uint8), vectors)])


def save(ds: Any, column: str, ids: np.ndarray, vectors: np.ndarray, damaged: np.ndarray) -> str | None:
    """Write the vectors of `column` at the version `ds` (as `exact_vectors.matrix` made them), atomically, and
    remove the column's files of this and older versions. None on an object store; never raises (a warning)."""
    try:
        fp = _fingerprint(ds, column)
        path = _path(ds, column, fp)
        if path is None:
            return None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        dim = vectors.shape[1]
        flat = pa.array(np.ascontiguousarray(vectors, np.float32).reshape(-1))
        b = pa.record_batch([pa.array(ids, pa.int64()), pa.array(damaged, pa.bool_()),
                             pa.FixedSizeListArray.from_arrays(flat, dim)], names=["_rowid", "damaged", "vector"])
        b = b.replace_schema_metadata({"fanout.fingerprint": fp, "fanout.crc": _crc(ids, damaged, vectors)})
        version_files.write_batch(path, b)
        for name in os.listdir(os.path.dirname(path)):
            m = NAME.match(name)
            if m and m["column"] == column and name != os.path.basename(path) and int(m["version"]) <= int(ds.version):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(os.path.dirname(path), name))
        log.info("wrote the exact-search vectors of %s v%d to %s (%.0f MB)", column, int(ds.version), path,
                 os.path.getsize(path) / 1e6)
        return path
    except Exception as e:  # noqa: BLE001  the file only saves later processes a load
        log.warning("exact-search vectors of %s not written to a file (%s); each process loads them", column, e)
        return None
