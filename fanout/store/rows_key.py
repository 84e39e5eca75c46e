"""An order-free key of some columns of every row of a table version, at the cost of the rows changed since the
version this process keyed last.

A per-version cache whose content depends on a few columns of every row (the titles and aliases of every note:
pipelines/clean_fields.py `collection_titles`) needs a key that says "the same rows' values as a version seen
before". Hashing every row per version reads the whole table (at 133,000 notes 0.4-0.85 s a version, in the
process that serves searches, beside them). Instead this keeps, per table, one 16-byte digest per row in row-id
order; a later version's digests are the kept rows' plus the added rows' (read by row id: fanout/store/chunk_rows.py),
its key the sha256 of `extra` and the sorted digests: equal for equal multisets of row values, whatever their
order or row ids.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

_DIGEST = np.dtype("V16")


@dataclass
class _Keyed:
    version: int
    ids: np.ndarray  # the version's sorted row ids
    digests: np.ndarray  # one per row, in `ids` order
    columns: tuple[str, ...]


_HELD: dict[str, _Keyed] = {}  # table uri -> the version this process keyed last
_LOCK = threading.Lock()


def _digest_rows(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> np.ndarray:
    out = np.empty(len(rows), _DIGEST)
    for i, r in enumerate(rows):
        text = json.dumps([r.get(c) for c in columns], ensure_ascii=False, sort_keys=True)
        out[i] = np.frombuffer(hashlib.blake2b(text.encode("utf-8", "surrogateescape"), digest_size=16).digest(),
                               _DIGEST)[0]
    return out


def rows_key(ds, columns: list[str], extra: object = None) -> str:
    """The key of `columns` of every row of `ds` (a pinned Lance version) and `extra` (JSON-able): equal exactly
    when the multiset of the rows' values and `extra` are (up to a 128-bit digest per row)."""
    from fanout.store.chunk_rows import row_steps, sorted_row_ids, take_rows

    cols = tuple(columns)
    uri, version = str(ds.uri), int(ds.version)
    ids = sorted_row_ids(ds)
    with _LOCK:
        held = _HELD.get(uri)
    if held is not None and held.columns == cols and held.version == version:
        digests = held.digests
    elif held is not None and held.columns == cols and held.version < version:
        step, added = row_steps(held.ids, ids)
        kept = step >= 0
        digests = np.empty(len(ids), _DIGEST)
        digests[step[kept]] = held.digests[kept]
        rows = take_rows(ds, ids[added].astype(np.int64), list(cols)).to_pylist() if len(added) else []
        digests[added] = _digest_rows(rows, cols)
    else:
        t = ds.to_table(columns=list(cols), with_row_id=True)
        order = np.argsort(t["_rowid"].to_numpy(), kind="stable")
        digests = _digest_rows(t.select(list(cols)).to_pylist(), cols)[order]
    if held is None or held.version <= version:  # (never back to an older version)
        with _LOCK:
            _HELD[uri] = _Keyed(version, ids, digests, cols)
    h = hashlib.sha256(json.dumps(extra, ensure_ascii=False, sort_keys=True).encode("utf-8", "surrogateescape"))
    h.update(np.sort(digests).tobytes())
    return h.hexdigest()
