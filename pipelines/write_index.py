"""Stage: write chunks (with vectors) and documents into LanceDB, incrementally, and (re)build FTS indexes.

Per language one FTS column per field (body/title/heading), each with its language's stemmer: LanceDB takes
one language per index and the query side cannot choose between two indexes on one column (STACK.md).
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc

from fanout.db import FTS_FIELDS, LANG_NAMES, Collection, fts_columns
from fanout.schemas import DOCUMENTS

log = logging.getLogger(__name__)


def plan_changes(notes: pa.Table, existing: pa.Table | None) -> tuple[set[str], set[str], set[str]]:
    """Compare scanned notes with the documents table: (new_or_changed, deleted, unchanged) paths."""
    scanned = dict(zip(notes["path"].to_pylist(), notes["content_hash"].to_pylist()))
    known = {} if existing is None else dict(zip(existing["path"].to_pylist(),
                                                 existing["content_hash"].to_pylist()))
    changed = {p for p, h in scanned.items() if known.get(p) != h}
    deleted = set(known) - set(scanned)
    return changed, deleted, set(scanned) - changed


def add_fts_columns(chunks: pa.Table, notes: pa.Table, languages: tuple[str, ...]) -> pa.Table:
    """Add body_<lang>, title_<lang>, heading_<lang> columns (NULL unless the chunk is in that language).

    The title column holds the title, the aliases (and each alias's last path segment) and the tags.
    """
    meta = {n["path"]: n for n in notes.select(["path", "aliases", "tags"]).to_pylist()}
    title_text = []
    for path, title in zip(chunks["path"].to_pylist(), chunks["title"].to_pylist()):
        n = meta.get(path, {"aliases": [], "tags": []})
        aliases = n["aliases"] or []
        parts = [title, *aliases, *(a.rsplit("/", 1)[-1] for a in aliases if "/" in a), *(n["tags"] or [])]
        title_text.append(" ; ".join(parts))
    values = {"body": chunks["text"].to_pylist(), "title": title_text, "heading": chunks["heading"].to_pylist()}
    langs = chunks["lang"].to_pylist()
    for lang in languages:
        for f in FTS_FIELDS:
            col = [v if lg == lang else None for v, lg in zip(values[f], langs)]
            chunks = chunks.append_column(f"{f}_{lang}", pa.array(col, pa.string()))
    return chunks


def documents_table(notes: pa.Table, chunks: pa.Table) -> pa.Table:
    counts = pc.value_counts(chunks["path"]) if chunks.num_rows else None
    n = {} if counts is None else {c["values"]: c["counts"] for c in counts.to_pylist()}
    return pa.table({
        "path": notes["path"], "title": notes["title"], "aliases": notes["aliases"], "lang": notes["lang"],
        "content_hash": notes["content_hash"], "mtime": notes["mtime"],
        "n_chunks": pa.array([n.get(p, 0) for p in notes["path"].to_pylist()], pa.int32()),
    }, schema=DOCUMENTS)


def _quote(paths: set[str]) -> str:
    return ", ".join("'" + p.replace("'", "''") + "'" for p in sorted(paths))


def delete_paths(tbl, paths: set[str]) -> None:
    """Delete every row of the given note paths (in slices, to keep the SQL IN-list short)."""
    ordered = sorted(paths)
    for i in range(0, len(ordered), 500):
        tbl.delete(f"path IN ({_quote(set(ordered[i:i + 500]))})")


def write_index(col: Collection, chunks: pa.Table, docs: pa.Table, remove: set[str]) -> None:
    """Upsert one group: drop the rows of `remove` paths, then add the new chunks and documents.

    Chunks go first: a documents row exists only once its chunks are written, so a killed run resumes.
    """
    for name, new in ((col.chunks_name, chunks), (col.documents_name, docs)):
        if not col.has(name):
            col.db.create_table(name, data=new)
            continue
        tbl = col.table(name)
        delete_paths(tbl, remove)
        if new.num_rows:
            tbl.add(new)
    log.debug("wrote %d chunks, %d documents", chunks.num_rows, docs.num_rows)


def build_fts(col: Collection, languages: tuple[str, ...]) -> None:
    """(Re)build one FTS index per language column, each with that language's stemmer."""
    from lancedb.index import FTS

    tbl = col.table(col.chunks_name)
    for c in fts_columns(languages):
        lang = c.rsplit("_", 1)[1]
        tbl.create_index(c, config=FTS(language=LANG_NAMES[lang], stem=True, remove_stop_words=True,
                                       ascii_folding=True, lower_case=True), replace=True)
