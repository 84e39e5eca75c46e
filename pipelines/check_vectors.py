"""Stage: vectors checked before they are written, and reused across a re-chunk.

`check_vectors` drops every note that has a vector which is not finite or not unit length (the embedder
writes unit vectors), so NaN/inf never enters the index; the note is reported as skipped and retried on the
next run. `embed_reusing` embeds only chunks whose `embed_text` is new: after a chunking change, texts that
come out identical keep their old vectors (same model and prompt, so the same vector).
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fanout.pipelines.embed_chunks import embed_chunks

from fanout.exec.runner import Runner
from fanout.store.db import Collection
from fanout.store.integrity import IndexStateError, bad_vector_rows

log = logging.getLogger(__name__)


def check_vectors(chunks: pa.Table) -> tuple[pa.Table, list[dict]]:
    """CHUNKS+vector -> (rows of notes whose vectors are all sound, SKIPPED rows for the other notes)."""
    if chunks.num_rows == 0 or "vector" not in chunks.column_names:
        return chunks, []
    bad = bad_vector_rows(chunks["vector"])
    if not len(bad):
        return chunks, []
    paths = chunks["path"].take(pa.array(bad)).to_pylist()
    counts: dict[str, int] = {}
    for p in paths:
        counts[p] = counts.get(p, 0) + 1
    skipped = [{"path": p, "reason": "embedding_failed",
                "detail": f"{n} chunk vector(s) came back NaN/inf or zero from the embedder; the note was not "
                          "written and is retried on the next run"} for p, n in sorted(counts.items())]
    for s in skipped:
        log.debug("skipped %s: %s (%s)", s["path"], s["reason"], s["detail"])  # the caller reports it
    keep = pc.invert(pc.is_in(chunks["path"], pa.array(sorted(counts), pa.string())))
    return chunks.filter(keep), skipped


def old_vectors(col: Collection, max_rows: int = 2_000_000) -> dict[str, list[float]]:
    """embed_text -> vector of the current chunks table (read before a rebuild drops it); {} if unreadable."""
    if not col.has(col.chunks_name):
        return {}
    try:
        with col.guard(col.chunks_name):
            tbl = col.db.open_table(col.chunks_name)
            if tbl.count_rows() > max_rows:
                log.info("old index has over %d chunks: vectors are not reused", max_rows)
                return {}
            # the embedder's full vectors: `vector_full` when the searched ones are cut (Matryoshka)
            src = "vector_full" if "vector_full" in tbl.schema.names else "vector"
            t = tbl.search().select(["embed_text", src]).limit(None).to_arrow()
    except IndexStateError as e:
        log.warning("old vectors not reused: %s", e)
        return {}
    bad = set(bad_vector_rows(t[src]).tolist())
    return {txt: v for i, (txt, v) in enumerate(zip(t["embed_text"].to_pylist(), t[src].to_pylist()))
            if i not in bad and txt is not None}


def split_reused(chunks: pa.Table, reuse: dict[str, list[float]]) -> pa.Table:
    """The chunks whose embed_text has no reusable vector: what still goes to the embedder."""
    if not reuse or chunks.num_rows == 0:
        return chunks
    return chunks.filter(pa.array([t not in reuse for t in chunks["embed_text"].to_pylist()]))


def note_groups(paths: list[str], chunks: pa.Table, group: int, reuse: dict[str, list[float]]) -> list:
    """Groups of whole notes, about `group` chunks each, in `paths` order: ((their paths, their chunks, the first
    one's index in `paths`), the chunks still to embed: split_reused). A note's chunks follow it in `chunks`
    (chunk_notes keeps the notes' order), so a group's chunks are a slice of the table: no copy."""
    per_note: dict[str, int] = {}
    for p in chunks["path"].to_pylist():
        per_note[p] = per_note.get(p, 0) + 1
    groups = []
    i = at = 0
    while i < len(paths):
        first = i
        sel: list[str] = []
        n = 0
        while i < len(paths) and (not sel or n < group):
            sel.append(paths[i])
            n += per_note.get(paths[i], 0)
            i += 1
        part = chunks.slice(at, n)
        at += n
        groups.append(((sel, part, first), split_reused(part, reuse)))
    return groups


def _embed(chunks: pa.Table, runner: Runner | None) -> pa.Table:
    if chunks.num_rows == 0:  # as embed_chunks: nothing to embed, no runner needed
        return chunks
    assert runner is not None, "embed_reusing: neither `fresh` vectors nor a runner to embed the chunks with"
    return embed_chunks(chunks, runner)


def embed_reusing(chunks: pa.Table, runner: Runner | None, reuse: dict[str, list[float]],
                  fresh: pa.Table | None = None) -> tuple[pa.Table, int]:
    """CHUNKS -> (CHUNKS + vector, how many vectors came from `reuse`); the rest go to the embedder, or come
    embedded already as `fresh` (split_reused's rows + vector, in order: the Ray Data index path)."""
    if not reuse or chunks.num_rows == 0:
        return (fresh if fresh is not None else _embed(chunks, runner)), 0
    texts = chunks["embed_text"].to_pylist()
    known = np.array([t in reuse for t in texts])
    if not known.any():
        return (fresh if fresh is not None else _embed(chunks, runner)), 0
    fresh_idx = np.flatnonzero(~known)
    if fresh is None:
        fresh = _embed(chunks.take(pa.array(fresh_idx)), runner) if len(fresh_idx) else None
    elif not len(fresh_idx):
        fresh = None
    dim = len(next(iter(reuse.values())))
    if fresh is not None:
        dim = fresh.schema.field("vector").type.list_size
    vecs: list = [None] * len(texts)
    for i in np.flatnonzero(known):
        vecs[i] = reuse[texts[i]]
    if fresh is not None:
        for i, v in zip(fresh_idx, fresh["vector"].to_pylist()):
            vecs[i] = v
    col = pa.array(vecs, pa.list_(pa.float32(), dim))
    return chunks.append_column("vector", col), int(known.sum())
