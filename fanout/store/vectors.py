"""Vectors and indexes of a collection's tables: Matryoshka truncation, the searched and full vector columns,
scalar (BTREE/BITMAP) and vector (IVF_*) indexes, and re-deriving another dimension without re-embedding.

The `vector` column holds what is searched, at `index.vector_dim` dimensions (re-normalised); when that is
smaller than the embedder's own size the full vectors are kept in `vector_full`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from lancedb.db import DBConnection
    from lancedb.table import Table

    from fanout.config import IndexConfig

log = logging.getLogger(__name__)

VECTOR = "vector"  # the searched (and indexed) column
VECTOR_FULL = "vector_full"  # the embedder's full vectors, kept only when `vector` is truncated
REDERIVE_BATCH = 20_000  # rows per batch when a dimension change rewrites the chunks table


def truncate_vectors(vectors: np.ndarray, dim: int) -> np.ndarray:
    """First `dim` components of each row, re-normalised to unit length (Matryoshka truncation).

    A row already `dim` long is returned as it is; a shorter one is an error.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    if vectors.shape[1] == dim:
        return vectors
    if vectors.shape[1] < dim:
        raise ValueError(f"vectors have {vectors.shape[1]} dimensions, fewer than the {dim} asked for; "
                         f"set index.vector_dim to at most {vectors.shape[1]} (0 = full)")
    cut = vectors[:, :dim]
    return cut / np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)


def _fixed_list(arr: np.ndarray) -> pa.FixedSizeListArray:
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1), pa.float32()), arr.shape[1])


def vector_dims(tbl) -> tuple[int, int]:
    """(searched dimension, the embedder's full dimension) of a chunks table."""
    schema = tbl.schema
    dim = schema.field(VECTOR).type.list_size
    full = schema.field(VECTOR_FULL).type.list_size if VECTOR_FULL in schema.names else dim
    return dim, full


def fit_vectors(chunks: pa.Table, vector_dim: int, native: int | None = None) -> pa.Table:
    """Give a chunks table the searched `vector` at `vector_dim` (0 = full) from its full vectors.

    The full vectors come from `vector_full` when present, else from `vector`; they are kept in
    `vector_full` only when the searched vector is shorter.
    """
    if chunks.num_rows == 0 and VECTOR not in chunks.column_names:
        return chunks
    src = VECTOR_FULL if VECTOR_FULL in chunks.column_names else VECTOR
    full_dim = native or chunks.schema.field(src).type.list_size
    want = vector_dim or full_dim
    if want > full_dim:
        raise ValueError(f"index.vector_dim is {vector_dim} but the embedder gives {full_dim} dimensions; "
                         f"use 0 (full) or a smaller Matryoshka size such as 512, 256 or 128")
    full = chunks[src].combine_chunks()
    out = chunks.drop_columns([c for c in (VECTOR, VECTOR_FULL) if c in chunks.column_names])
    if want == full_dim:
        return out.append_column(pa.field(VECTOR, full.type), full)
    flat = full.flatten().to_numpy(zero_copy_only=False).reshape(-1, full_dim) if len(full) else \
        np.zeros((0, full_dim), np.float32)
    cut = _fixed_list(truncate_vectors(flat, want)) if len(full) else \
        pa.array([], pa.list_(pa.float32(), want))
    return out.append_column(VECTOR, cut).append_column(pa.field(VECTOR_FULL, full.type), full)


# -- indexes ---------------------------------------------------------------------------------------------
def index_columns(tbl) -> dict[str, str]:
    """column -> index type (BTREE, FTS, IVF_PQ, ...) of a table's indexes: a lancedb table, or a Lance
    dataset (whose `list_indices` gives dicts)."""
    out = {}
    for ix in tbl.list_indices():
        if isinstance(ix, dict):
            for c in ix.get("fields") or []:
                out[c] = str(ix.get("type"))
            continue
        for c in ix.columns:
            out[c] = str(ix.index_type)
    return out


def ensure_scalar_index(tbl, column: str, index_type: str = "BTREE") -> bool:
    """Create a scalar index (BTREE, or BITMAP for few distinct values) on `column` unless it has one.

    Returns True when one was built. Rows added later are still found (Lance scans what the index does not
    cover) and `optimize()` folds them in. A BTREE speeds `column IN (...)` and `merge_insert(column)`.
    """
    from lancedb.index import Bitmap, BTree

    if column in index_columns(tbl):
        return False
    kinds = {"BTREE": BTree, "BITMAP": Bitmap}
    if index_type not in kinds:
        raise ValueError(f"scalar index type {index_type!r} is unknown; choose one of {sorted(kinds)}")
    tbl.create_index(column, config=kinds[index_type](), replace=True)
    return True


def has_vector_index(tbl) -> bool:
    return VECTOR in index_columns(tbl)


_VECTOR_INDEXES = {"IVF_PQ": "IvfPq", "IVF_RQ": "IvfRq", "IVF_SQ": "IvfSq", "IVF_FLAT": "IvfFlat",
                   "IVF_HNSW_SQ": "IvfHnswSq", "IVF_HNSW_PQ": "IvfHnswPq"}


def vector_index_params(icfg: IndexConfig, rows: int, dim: int) -> dict[str, Any]:
    """The build parameters for `rows` vectors of `dim` dimensions (0 in config = derived here)."""
    kind = icfg.vector_index_type
    if kind not in _VECTOR_INDEXES:
        raise ValueError(f"index.vector_index_type {kind!r} is unknown; choose one of {sorted(_VECTOR_INDEXES)}")
    # sqrt(rows) partitions, as measured by bench/index_scale.py (20k and 100k rows); k-means training cost
    # grows with partitions x sample (256 rows per partition), so very large tables may want fewer
    parts = icfg.vector_partitions or max(1, min(4096, round(rows ** 0.5)))
    params: dict[str, Any] = {"index_type": kind, "metric": "cosine", "num_partitions": int(parts)}
    if kind.endswith("_PQ"):
        sub = icfg.vector_sub_vectors or max(1, dim // 16)
        while dim % sub:  # PQ needs the dimension to split evenly
            sub -= 1
        params["num_sub_vectors"] = int(sub)
    if "HNSW" in kind:
        params["m"] = icfg.hnsw_m
        params["ef_construction"] = icfg.hnsw_ef_construction
    return params


def build_vector_index(tbl, icfg: IndexConfig) -> dict[str, Any]:
    """Build (or replace) the vector index of a chunks table; returns what the manifest records."""
    import lancedb.index as lix

    rows = tbl.count_rows()
    dim = vector_dims(tbl)[0]
    params = vector_index_params(icfg, rows, dim)
    kw = {k: v for k, v in params.items() if k not in ("index_type", "metric")}
    config = getattr(lix, _VECTOR_INDEXES[params["index_type"]])(distance_type="cosine", **kw)
    t = time.perf_counter()
    tbl.create_index(VECTOR, config=config, replace=True)
    secs = time.perf_counter() - t
    log.info("built %s on %d rows x %d dims in %.1fs", params["index_type"], rows, dim, secs)
    return {**params, "column": VECTOR, "dim": dim, "rows": rows, "seconds": round(secs, 2),
            "built": time.time()}


def rederive_vectors(db: DBConnection, tbl: Table, vector_dim: int) -> tuple[int, int]:
    """Rewrite the chunks table `tbl` (a lancedb table of the connection `db`) with `vector` at another
    Matryoshka size, from the stored full vectors.

    No re-embedding; every index of the table is dropped by the rewrite (the caller rebuilds them, and forgets
    its handles of the table). Returns (old dim, new dim).
    """
    name = tbl.name
    old, full = vector_dims(tbl)
    want = vector_dim or full
    if want == old:
        return old, want
    if VECTOR_FULL not in tbl.schema.names and old != full:
        raise ValueError(f"{name} holds {old}-d vectors and no full ones, so {want} cannot be derived; "
                         f"drop the collection's tables and run `fanout index` again to re-embed")
    rows = tbl.count_rows()
    reader = tbl.search().limit(None).to_batches(batch_size=REDERIVE_BATCH)  # streamed: no whole-table copy
    first = fit_vectors(pa.Table.from_batches([next(iter(reader))]), vector_dim, native=full) if rows else None

    def batches():
        if first is not None:
            yield from first.to_batches()
        for b in reader:
            yield from fit_vectors(pa.Table.from_batches([b]), vector_dim, native=full).to_batches()

    schema = first.schema if first is not None else fit_vectors(tbl.schema.empty_table(), vector_dim, full).schema
    db.create_table(name, data=pa.RecordBatchReader.from_batches(schema, batches()),
                        mode="overwrite")
    log.info("re-derived %s vectors %d -> %d dims (%d rows, no re-embedding)", name, old, want, rows)
    return old, want
