"""Configs and vector rows for the exact and ANN vector search tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def _rows(rng, n: int, start: int, dim: int = 32, centres: np.ndarray | None = None) -> pa.Table:
    if centres is None:
        v = rng.normal(size=(n, dim)).astype(np.float32)
    else:  # clustered, as embeddings are: near-ties between neighbours are common
        v = centres[rng.integers(0, len(centres), n)] + 0.4 * rng.normal(size=(n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return pa.table({"chunk_id": [f"c{i}" for i in range(start, start + n)],
                     "path": [f"p{i % 13}.md" for i in range(start, start + n)],
                     "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim)})


def _cfg(**index):
    from fanout.config import load_config

    return load_config("fake").replace(index=index) if index else load_config("fake")


def _lists(t: pa.Table) -> dict[int, list[tuple[str, str, float]]]:
    out: dict[int, list] = {}
    for qi, cid, p, d in zip(t["query_index"].to_pylist(), t["chunk_id"].to_pylist(), t["path"].to_pylist(),
                             t["_distance"].to_pylist(), strict=True):
        out.setdefault(qi, []).append((cid, p, d))
    return out
