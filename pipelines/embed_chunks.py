"""Stage: embed chunks with the Embedder actor(s), through whichever runner is in use."""

from __future__ import annotations

import pyarrow as pa

from fanout.runner import Runner


def embed_chunks(chunks: pa.Table, runner: Runner) -> pa.Table:
    """CHUNKS -> CHUNKS + `vector`. Texts go out sorted by length so each actor batch is evenly sized."""
    if chunks.num_rows == 0:
        return chunks
    order = pa.compute.sort_indices(pa.compute.utf8_length(chunks["embed_text"]))
    batch = pa.table({
        "i": order,
        "text": chunks["embed_text"].take(order),
        "title": chunks["title"].take(order),
        "role": pa.array(["document"] * chunks.num_rows),
    })
    out = runner.map("embedder", batch)
    back = pa.compute.sort_indices(out["i"])
    return chunks.append_column("vector", out["vector"].take(back))
