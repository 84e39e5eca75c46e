"""State files and index data checked before use: the manifest, table versions, vectors.

Every failure is one `IndexStateError` line naming the file or table and the fix (usually
`fanout index VAULT --db DIR --rebuild`), never a traceback or a silently wrong answer.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fanout.errors import IndexMissing, IndexStateError  # noqa: F401 (IndexMissing: its old import path)

log = logging.getLogger(__name__)

# manifest key -> (type, what it is), checked on every read
MANIFEST_KEYS: dict[str, tuple[type, str]] = {
    "schema_version": (int, "the index layout version"),
    "embedder": (dict, "the embedding model and prompt that made the vectors"),
    "chunk": (dict, "the chunking settings"),
    "languages": (list, "the full-text languages"),
    "vault": (str, "the vault folder"),
}
EMBEDDER_KEYS = ("spec", "file", "sha256", "prompt")
NORM_TOLERANCE = 1e-2  # stored vectors are unit length; a row further off than this is damaged


def rebuild_hint(db_dir: str | Path, collection: str, vault: str | None = None) -> str:
    coll = "" if collection == "notes" else f" --collection {collection}"
    return f"`fanout index {vault or 'VAULT'} --db {db_dir}{coll} --rebuild`"


def parse_manifest(text: str, path: Path | str, hint: str) -> dict[str, Any]:
    """Manifest JSON -> dict, checked: raises IndexStateError naming the file, what is wrong and the fix."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise IndexStateError(f"index manifest {path} is not valid JSON ({e.msg} at line {e.lineno}); it is "
                              f"damaged or was cut short: rebuild the index with {hint}") from None
    if not isinstance(data, dict):
        raise IndexStateError(f"index manifest {path} holds a JSON {type(data).__name__}, not an object; "
                              f"rebuild the index with {hint}")
    for key, (typ, what) in MANIFEST_KEYS.items():
        if not isinstance(data.get(key), typ) or isinstance(data.get(key), bool):
            got = "missing" if key not in data else f"a {type(data[key]).__name__}"
            raise IndexStateError(f"index manifest {path}: `{key}` ({what}) is {got}, expected a "
                                  f"{typ.__name__}; rebuild the index with {hint}")
    emb = data["embedder"]
    for key in EMBEDDER_KEYS:
        if not isinstance(emb.get(key), str) or not emb.get(key):
            raise IndexStateError(f"index manifest {path}: `embedder.{key}` is missing or empty; rebuild the "
                                  f"index with {hint}")
    if not all(isinstance(x, str) for x in data["languages"]):
        raise IndexStateError(f"index manifest {path}: `languages` must be a list of language codes; rebuild "
                              f"the index with {hint}")
    tables = data.get("tables")
    if tables is not None and not (isinstance(tables, dict) and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in tables.values())):
        raise IndexStateError(f"index manifest {path}: `tables` must map table names to version numbers; "
                              f"rebuild the index with {hint}")
    return data


def bad_vector_rows(vectors: pa.ChunkedArray | pa.Array, tolerance: float = NORM_TOLERANCE) -> np.ndarray:
    """Row positions whose vector is missing, not finite, or not unit length (what the embedder writes)."""
    arr = vectors.combine_chunks() if isinstance(vectors, pa.ChunkedArray) else vectors
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    nulls = np.asarray(pc.is_null(arr).to_numpy(zero_copy_only=False))
    dim = arr.type.list_size if pa.types.is_fixed_size_list(arr.type) else None
    if dim is None:  # variable-size lists: check row by row
        bad = [i for i, v in enumerate(arr.to_pylist()) if v is None or not v or not _unit(np.asarray(v),
                                                                                          tolerance)]
        return np.asarray(bad, dtype=np.int64)
    with np.errstate(invalid="ignore", over="ignore"):
        flat = np.asarray(arr.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    if arr.null_count:  # flatten() skips null rows: rebuild positions
        full = np.full((n, dim), np.nan)
        full[~nulls] = flat.reshape(-1, dim)
    else:
        full = flat.reshape(n, dim)
    with np.errstate(invalid="ignore", over="ignore"):
        norms = np.sqrt((full * full).sum(axis=1))
    ok = np.isfinite(full).all(axis=1) & (np.abs(norms - 1.0) <= tolerance)
    return np.flatnonzero(~ok)


def _unit(v: np.ndarray, tolerance: float) -> bool:
    with np.errstate(invalid="ignore", over="ignore"):
        n = float(np.sqrt((v.astype(np.float64) ** 2).sum()))
    return bool(np.isfinite(v).all()) and math.isfinite(n) and abs(n - 1.0) <= tolerance


def describe_error(e: BaseException) -> str:
    """A Lance/Arrow error as one short line (their messages carry Rust source locations)."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return (msg[:240] + "...") if len(msg) > 240 else msg
