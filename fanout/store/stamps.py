"""Which index answered: a collection's stamp and content key (`index_stamp`, `content_key`), and the table versions
a batch's stages share (`tag_batch`, `pin_batch`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol

import pyarrow as pa


class Collection(Protocol):
    """What these need of fanout.store.db's `Collection` (which imports them: no import circle)."""

    @property
    def documents_name(self) -> str: ...

    @property
    def pinned(self) -> dict[str, int]: ...

    def has(self, name: str) -> bool: ...

    def open_version(self, name: str, version: int | None = None) -> Any: ...

    def refresh(self) -> dict[str, Any]: ...

    def pin(self, want: dict[str, int]) -> None: ...


def index_stamp(name: str, manifest: dict[str, Any]) -> str:
    """`<collection>@<12 hex>`: which index answered: what the answers depend on (the embedder, its prompt,
    the chunking, the languages, the vector size, the notes' content (`content`: a hash of every indexed
    path and its content hash, written by `fanout index`) and the counts). Not the table versions:
    `fanout optimize` makes new versions of the same rows. Batch output carries it in its `index` column, so a
    later reader (`fanout gaps`) can refuse answers of another collection or index version. A manifest of an
    older fanout (no `content`) keeps the stamp it had (table versions in place of the content)."""
    import hashlib

    stats = manifest.get("stats") or {}
    content = manifest.get("content")
    keys = ("embedder", "chunk", "languages", "vectors", "content") if content else \
        ("embedder", "chunk", "languages", "tables")
    key = {k: manifest.get(k) for k in keys}
    if content:
        key["vectors"] = (key["vectors"] or {}).get("dim") if isinstance(key["vectors"], dict) else None
    key["counts"] = [stats.get("notes"), stats.get("chunks")]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{name}@{digest}"


def content_key(col: Collection) -> str | None:
    """A digest of the indexed notes (every path and its content hash, `content_digest`): what answers depend on,
    unchanged by `fanout optimize` (the manifest's `content`, fanout.store.db.index_stamp)."""

    if not col.has(col.documents_name):
        return None
    t = col.open_version(col.documents_name).to_table(columns=["path", "content_hash"])
    return content_digest(zip(t["path"].to_pylist(), t["content_hash"].to_pylist()))


CONTENT_PREFIX = "sum:"  # what marks the summed digest (an index of older fanout holds a sorted hash: no prefix)
_MOD = 1 << 256


def content_term(path: str, digest: str) -> int:
    """One note's part of the content digest: sha256 of its path and content hash, as a number."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{path}\0{digest}\n".encode("utf-8", "surrogateescape")).digest(), "big")


def content_sum(pairs: Iterable[tuple[str, str]]) -> int:
    """The sum of `content_term` over (path, content hash) pairs, mod 2^256."""
    return sum(content_term(p, h) for p, h in pairs) % _MOD


def content_text(total: int) -> str:
    """The manifest's `content` of a `content_sum`."""
    return f"{CONTENT_PREFIX}{total % _MOD:064x}"


def content_value(text: object) -> int | None:
    """The sum a manifest's `content` holds; None for another form (an older fanout's sorted hash, or none)."""
    if not isinstance(text, str) or not text.startswith(CONTENT_PREFIX):
        return None
    try:
        return int(text[len(CONTENT_PREFIX):], 16)
    except ValueError:
        return None


def content_digest(pairs: Iterable[tuple[str, str]]) -> str:
    """The `content` key of (path, content hash) pairs (`content_key`): what an index run compares its scan with
    to see, without reading the documents table, that the pinned index holds exactly these notes.

    A sum of one hash per pair (mod 2^256), so a round adds and removes the notes it changed in O(changed)
    (pipelines/index.py) instead of hashing every path again; the order of the pairs does not matter. It tells
    an index from another by accident, not against someone who crafts notes to collide (not a signature)."""
    return content_text(content_sum(pairs))


def legacy_content_digest(pairs: Iterable[tuple[str, str]]) -> str:
    """The `content` an older fanout wrote (a sha256 over the sorted pairs): an index it made is still recognised
    as unchanged, and gets the summed form at its next round that writes (never re-embedded)."""
    import hashlib

    h = hashlib.sha256()
    for path, digest in sorted(pairs):
        h.update(f"{path}\0{digest}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def same_content(content: object, pairs: Iterable[tuple[str, str]]) -> bool:
    """Whether a manifest's `content` is the digest of `pairs`, in either form (an older fanout's sorted hash)."""
    if not content:
        return False
    return content == (content_digest if content_value(content) is not None else legacy_content_digest)(pairs)


INDEX_VERSIONS = "_index"  # batch column: the table versions the first index stage pinned (JSON)


def tag_batch(col: Collection, batch: pa.Table) -> pa.Table:
    """Pin the manifest's versions (`refresh`) and record them in the batch, so every later stage of this
    batch reads the same index, wherever it runs."""
    col.refresh()
    tag = json.dumps(col.pinned, sort_keys=True)
    arr = pa.array([tag] * batch.num_rows, pa.string())
    if INDEX_VERSIONS in batch.column_names:
        return batch.set_column(batch.column_names.index(INDEX_VERSIONS), INDEX_VERSIONS, arr)
    return batch.append_column(INDEX_VERSIONS, arr)


def pin_batch(col: Collection, batch: pa.Table) -> None:
    """Check out the versions an earlier stage recorded in the batch (`tag_batch`); else the manifest's.
    A batch re-blocked from rows of two index runs (a re-index during a Ray job) reads the newer one."""
    tags = batch.column(INDEX_VERSIONS).drop_null().unique().to_pylist() \
        if INDEX_VERSIONS in batch.column_names and batch.num_rows else []
    if not tags:
        col.refresh()
        return
    versions = [json.loads(t) for t in tags]
    col.pin(max(versions, key=lambda v: sorted(v.values())))
