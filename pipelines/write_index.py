"""Stage: write chunks (with vectors) and documents into LanceDB, incrementally, and build their indexes.

Per language one FTS column per field (body/title/heading), each with its language's stemmer: LanceDB takes
one language per index and the query side cannot choose between two indexes on one column (STACK.md).
BTREE indexes on chunks `chunk_id`, `path` and documents `path`; a vector index once the chunks table has
`index.vector_index_min_rows` rows and more than `index.exact_search_rows` (below either, searches are exact).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager

import pyarrow as pa
import pyarrow.compute as pc

from fanout.config import Config, IndexConfig
from fanout.config.vocab import LANG_NAMES
from fanout.filters import FILTER_COLUMNS, tag_values
from fanout.schemas import DOCUMENTS
from fanout.store.db import FTS_FIELDS, Collection, fts_columns
from fanout.store.vectors import (
    VECTOR_FULL,
    build_vector_index,
    ensure_scalar_index,
    has_vector_index,
    vector_dims,
)
from fanout.text import nfc

log = logging.getLogger(__name__)


def plan_changes(notes: pa.Table | dict[str, str], existing: pa.Table | None) -> tuple[set[str], set[str], set[str]]:
    """Compare scanned notes (NOTES rows, or path -> content hash) with the documents table: (new_or_changed,
    deleted, unchanged) paths."""
    scanned = notes if isinstance(notes, dict) else \
        dict(zip(notes["path"].to_pylist(), notes["content_hash"].to_pylist()))
    known = {} if existing is None else dict(zip(existing["path"].to_pylist(),
                                                 existing["content_hash"].to_pylist()))
    changed = {p for p, h in scanned.items() if known.get(p) != h}
    deleted = set(known) - set(scanned)
    return changed, deleted, set(scanned) - changed


def plan_touched(touched: set[str], hashes: dict[str, str], before: dict[str, str | None]) -> tuple[set[str], set[str]]:
    """`plan_changes` of a watch round whose record holds what the index holds: only the `touched` paths can
    differ (`hashes`: the scan's, `before`: the record's). Returns (new_or_changed, deleted) paths."""
    changed = {p for p in touched if p in hashes and hashes[p] != before.get(p)}
    return changed, {p for p, h in before.items() if h is not None and p not in hashes}


def has_paths(col: Collection, paths: set[str]) -> bool:
    """Whether the chunks table holds a row of any of `paths` (one read of its path column)."""
    t = col.open_version(col.chunks_name).to_table(columns=["path"])
    return bool(pc.any(pc.is_in(t["path"], pa.array(sorted(paths), pa.string()))).as_py())


def add_fts_columns(chunks: pa.Table, notes: pa.Table, languages: tuple[str, ...]) -> pa.Table:
    """Add body_<lang>, title_<lang>, heading_<lang> columns (NULL unless the chunk is in that language).

    The title column holds the title, the aliases (and each alias's last path segment) and the tags. Every
    value is NFC, like the query text (Collection.fts_search_many): "Größe" typed on one system matches
    it written decomposed (NFD, as macOS file names and some editors write it) on another.
    """
    meta = {n["path"]: n for n in notes.select(["path", "aliases", "tags"]).to_pylist()}
    title_text = []
    for path, title in zip(chunks["path"].to_pylist(), chunks["title"].to_pylist()):
        n = meta.get(path, {"aliases": [], "tags": []})
        aliases = n["aliases"] or []
        parts = [title, *aliases, *(a.rsplit("/", 1)[-1] for a in aliases if "/" in a), *(n["tags"] or [])]
        title_text.append(" ; ".join(parts))
    values = {"body": [_nfc(t) for t in chunks["text"].to_pylist()], "title": [_nfc(t) for t in title_text],
              "heading": [_nfc(t) for t in chunks["heading"].to_pylist()]}
    langs = chunks["lang"].to_pylist()
    for lang in languages:
        for f in FTS_FIELDS:
            col = [v if lg == lang else None for v, lg in zip(values[f], langs)]
            chunks = chunks.append_column(f"{f}_{lang}", pa.array(col, pa.string()))
    return chunks


def _nfc(text: str | None) -> str | None:
    return nfc(text) if text else text


def note_filter_values(notes: pa.Table) -> dict[str, dict[str, list[str]]]:
    """path -> {tags, props}: what the tag and property filters read (fanout/filters.py)."""
    cols = notes.select(["path", "tags", "inline_tags", "props"]).to_pylist()
    return {n["path"]: {"tags": tag_values([*(n["tags"] or []), *(n["inline_tags"] or [])]),
                        "props": n["props"] or []} for n in cols}


def add_filter_columns(chunks: pa.Table, notes: pa.Table) -> pa.Table:
    """+ `tags`, `props` per chunk (its note's values), so a filter is a `where` prefilter on the chunks table."""
    vals = note_filter_values(notes)
    paths = chunks["path"].to_pylist()
    for c in FILTER_COLUMNS:
        chunks = chunks.append_column(c, pa.array([vals.get(p, {}).get(c, []) for p in paths],
                                                  pa.list_(pa.string())))
    return chunks


def documents_table(notes: pa.Table, chunks: pa.Table) -> pa.Table:
    counts = pc.value_counts(chunks["path"]) if chunks.num_rows else None
    n = {} if counts is None else {c["values"]: c["counts"] for c in counts.to_pylist()}
    vals = note_filter_values(notes)
    paths = notes["path"].to_pylist()
    return pa.table({
        "path": notes["path"], "title": notes["title"], "aliases": notes["aliases"], "lang": notes["lang"],
        "content_hash": notes["content_hash"], "mtime": notes["mtime"],
        "n_chunks": pa.array([n.get(p, 0) for p in paths], pa.int32()),
        **{c: pa.array([vals[p][c] for p in paths], pa.list_(pa.string())) for c in FILTER_COLUMNS},
    }, schema=DOCUMENTS)


def _quote(paths: set[str]) -> str:
    return ", ".join("'" + p.replace("'", "''") + "'" for p in sorted(paths))


def delete_paths(tbl, paths: set[str], guard: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext) -> None:
    """Delete every row of the given note paths (in slices, to keep the SQL IN-list short); each delete runs
    inside `guard()` (Collection.writing: a failed one leaves no files behind)."""
    ordered = sorted(paths)
    for i in range(0, len(ordered), 500):
        with guard():
            tbl.delete(f"path IN ({_quote(set(ordered[i:i + 500]))})")


def delete_notes(col: Collection, name: str, paths: set[str]) -> None:
    """delete_paths on one of the collection's tables, each delete guarded by `col.writing`."""
    delete_paths(col.table(name), paths, lambda: col.writing(name))


def write_index(col: Collection, chunks: pa.Table, docs: pa.Table, remove: set[str]) -> None:
    """Upsert one group: drop the rows of `remove` paths, then add the new chunks and documents.

    Chunks go first: a documents row exists only once its chunks are written, so a killed run resumes.
    """
    for name, new in ((col.chunks_name, chunks), (col.documents_name, docs)):
        if not col.has(name):
            with col.writing(name):
                col.db.create_table(name, data=new)
            continue
        delete_notes(col, name, remove)
        if new.num_rows:
            with col.writing(name):
                col.table(name).add(new)
    log.debug("wrote %d chunks, %d documents", chunks.num_rows, docs.num_rows)


def build_fts(col: Collection, languages: tuple[str, ...]) -> None:
    """(Re)build one FTS index per language column, each with that language's stemmer."""
    from lancedb.index import FTS

    tbl = col.table(col.chunks_name)
    for c in fts_columns(languages):
        lang = c.rsplit("_", 1)[1]
        with col.writing(col.chunks_name):
            tbl.create_index(c, config=FTS(language=LANG_NAMES[lang], stem=True, remove_stop_words=True,
                                           ascii_folding=True, lower_case=True), replace=True)


SCALAR_INDEXES = {"chunks": ("chunk_id", "path"), "documents": ("path",)}  # BTREE per table kind


def vector_index_reason(tbl, icfg: IndexConfig, recorded: dict | None) -> str | None:
    """Why the chunks table needs a (new) vector index now, or None.

    Never below `vector_index_min_rows`, nor while searches are exact (at most `exact_search_rows` rows:
    the index would not be read); above both when there is none, when the configured type or partitions
    differ from the recorded build, or when the table has doubled since (IVF partitions are trained on the
    rows present at build time; rows added since are searched exactly until `optimize`).
    """
    rows = tbl.count_rows()
    if rows < icfg.vector_index_min_rows or rows <= icfg.exact_search_rows:
        return None
    if not has_vector_index(tbl) or not recorded:
        return (f"{rows} rows >= index.vector_index_min_rows {icfg.vector_index_min_rows} and > "
                f"index.exact_search_rows {icfg.exact_search_rows}")
    if recorded.get("index_type") != icfg.vector_index_type:
        return f"index.vector_index_type {recorded.get('index_type')} -> {icfg.vector_index_type}"
    if icfg.vector_partitions and recorded.get("num_partitions") != icfg.vector_partitions:
        return f"index.vector_partitions {recorded.get('num_partitions')} -> {icfg.vector_partitions}"
    if recorded.get("dim") != vector_dims(tbl)[0]:
        return f"vector dimension {recorded.get('dim')} -> {vector_dims(tbl)[0]}"
    if rows > 2 * int(recorded.get("rows") or 0):
        return f"rows grew from {recorded.get('rows')} to {rows} since the index was trained"
    return None


def build_indexes(col: Collection, cfg: Config, recorded: dict) -> dict:
    """Scalar and vector indexes of a collection; returns the manifest entries that describe them.

    `recorded` is the previous manifest (empty after a rebuild or a re-derivation).
    """
    chunks = col.table(col.chunks_name)
    scalar = {}
    for kind, name in (("chunks", col.chunks_name), ("documents", col.documents_name)):
        if col.has(name):
            tbl = col.table(name)
            for c in SCALAR_INDEXES[kind]:
                with col.writing(name):
                    ensure_scalar_index(tbl, c)
            scalar[name] = list(SCALAR_INDEXES[kind])
    dim, full = vector_dims(chunks)
    vectors = {"dim": dim, "full_dim": full, "full_column": VECTOR_FULL if dim != full else None,
               "distance": "cosine"}
    vi = recorded.get("vector_index") if has_vector_index(chunks) else None
    reason = vector_index_reason(chunks, cfg.index, vi)
    if reason:
        log.info("building the vector index of %s: %s", col.chunks_name, reason)
        with col.writing(col.chunks_name):
            vi = build_vector_index(chunks, cfg.index)
    return {"vectors": vectors, "vector_index": vi, "scalar_indexes": scalar}
