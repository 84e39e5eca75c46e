"""Full-text search over one pinned chunks version: one BM25 search per query over its per-language columns, on
one of two engines (`retrieve.fts_engine`). The caller (`Collection.fts_search_many`) hands in what a search
needs: the pinned Lance dataset, the retrieve settings, and the pinned rows' keys (sorted row ids and the
`path` / `chunk_id` columns in that order, `Collection.row_keys`) when those are all the caller selects.

- `memory` (the default): Lance's BM25 computed in numpy over postings built once per pinned version with
  Lance's own tokenizer (fanout/store/fts_memory.py): the same lists and scores, bit for bit, without a call into
  Lance (~1.4 ms of CPU each); a prefilter is the rows it keeps (fanout/store/row_filter.py), the search runs over
  those in memory. A column whose index this engine does not reproduce goes to Lance as below.
- `lance`: each search is one call into Lance itself (pylance, the Lance release lancedb embeds, pinned together
  in pyproject: the same index files, tokenizers and BM25, identical lists; tested in tests/test_fts_rowids.py),
  a few at a time on min(4, cores) threads (Lance releases the GIL).

Either way a search that wants only `path` / `chunk_id` asks for row ids and takes those columns from the keys.
(A third engine, lancedb's query builder on its asyncio loop, cost 5-22% more CPU a call than `lance` and was
removed; the git tag `experiment/fts-lancedb` keeps it.)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from fanout.store import fts_memory, fts_postings, row_filter
from fanout.text import nfc

if TYPE_CHECKING:
    from lance import LanceDataset

    from fanout.config import RetrieveConfig

log = logging.getLogger(__name__)
_POOL: list[Any] = []
_POOL_LOCK = threading.Lock()
_SHARED: OrderedDict[tuple[str, int], _State] = OrderedDict()  # (chunks table uri, version) -> its state
_SHARED_LOCK = threading.RLock()
Keys = tuple[np.ndarray, pa.Table]  # the pinned version's sorted row ids and its key columns in that order


def search_many(ds: LanceDataset, queries: list[str], columns: list[str], boosts: list[float], k: int, select: list[str],
                wheres: list[str | None] | None, keys: Keys | None, settings: RetrieveConfig | None
                ) -> list[pa.Table]:
    """One full-text search per query over the pinned chunks version `ds` (`select` + `_score` each);
    `wheres[i]` is query i's prefilter (fanout/filters.py), None for none; `keys`: the rows' `select` columns
    when those are only `path` / `chunk_id` (else None: Lance reads them)."""
    if not queries:
        return []
    queries = [nfc(q) if q else q for q in queries]  # the FTS columns hold NFC text (write_index)
    wheres = wheres or [None] * len(queries)
    if keys is not None and settings is not None and settings.fts_engine == "memory":
        mem = memory_columns(ds, columns, keys[0], settings)
        if mem is not None:
            return _memory_many(ds, mem, queries, columns, boosts, k, select, wheres, keys)
        state, t = _shared(ds), time.process_time()
        try:
            return _lance_many(ds, queries, columns, boosts, k, select, wheres, keys)
        finally:
            state.lance_cpu_s += time.process_time() - t
    return _lance_many(ds, queries, columns, boosts, k, select, wheres, keys)


def memory_columns(ds: LanceDataset, columns: list[str], ids: np.ndarray, settings: RetrieveConfig
                   ) -> list[fts_memory.MemoryColumn] | None:
    """The `memory` engine's postings of `columns` on the pinned version `ds` (sorted row ids `ids`), None when
    one of them is not served from memory (fanout/store/fts_memory.py says why) or not built yet. They are built
    once this process's Lance calls on this version have cost `retrieve.fts_memory_after` times what the build
    is estimated to cost (BUILD_S_PER_CELL a chunk and column), unless `retrieve.fts_postings_file` finds them in
    a file of this version (fanout/store/fts_postings.py: loaded at the first call; written after a build): a
    one-off search of a large index never waits for a build it would not pay back, a batch builds after its
    first call, and it never spends more than twice the cheaper of the two choices (1.0: the ski-rental rule).
    Shared by every Collection of the process on that version (the in-process loop's ProbeBM25 and Retrieve
    build them once)."""
    state = _shared(ds)
    use_file = settings.fts_postings_file and fts_postings.folder(ds) is not None
    if use_file and not all(c in state.columns or c in state.tried for c in columns):
        with _SHARED_LOCK:  # a postings file of this version: used from the first call, nothing built
            for c in columns:
                if c not in state.columns and c not in state.tried:
                    state.tried.add(c)
                    if (m := fts_postings.load_or_update(ds, c, ids)) is not None:
                        state.columns[c] = m
    if not all(c in state.columns for c in columns) and \
            state.lance_cpu_s < settings.fts_memory_after * len(ids) * len(columns) * fts_memory.BUILD_S_PER_CELL:
        return None
    with _SHARED_LOCK:
        for c in columns:
            if c not in state.columns:
                try:
                    state.columns[c] = fts_memory.memory_column(ds, c, ids)
                except Exception as e:  # noqa: BLE001  Lance itself still answers: a build must never fail a search
                    log.warning("full-text column %s of %s: postings not built (%s); Lance answers its searches",
                                c, ds.uri, e)
                    state.columns[c] = None
                if use_file and state.columns[c] is not None:  # the next process loads what this one built
                    fts_postings.save(ds, c, ids, state.columns[c])
    out = [state.columns[c] for c in columns]
    return None if any(m is None for m in out) else out


@dataclass
class _State:
    """This process's memory-engine state of one chunks table version."""

    lance_cpu_s: float = 0.0  # CPU its Lance full-text calls have cost (weighed against a build)
    columns: dict[str, Any] = field(default_factory=dict)  # column -> MemoryColumn, None: Lance answers it
    tried: set[str] = field(default_factory=set)  # columns whose postings file was looked for


def _shared(ds) -> _State:
    """The state of the chunks table version `ds`; the two versions used last are kept."""
    key = (ds.uri, int(ds.version))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = _State()
            while len(_SHARED) > 2:
                _SHARED.popitem(last=False)
        _SHARED.move_to_end(key)
        return _SHARED[key]


def _memory_many(ds, mem, queries, columns, boosts, k, select, wheres, keys) -> list[pa.Table]:
    from fanout.store.fts_memory import search

    ids, cols = keys
    out: list[pa.Table | None] = [None] * len(queries)
    to_lance = []
    for i, q in enumerate(queries):
        if not q.strip():
            out[i] = _empty(select)
            continue
        allowed = None
        if wheres[i]:
            allowed = row_filter.allowed(ds, ids, wheres[i])
            if allowed is None:
                to_lance.append(i)
                continue
        pos, score = search(mem, boosts, q, k, allowed=allowed)
        out[i] = _empty(select) if not len(pos) else \
            cols.take(pa.array(pos)).select(select).append_column("_score", pa.array(score, pa.float32()))
    if to_lance:  # a prefilter Lance could not evaluate here: Lance answers (and says what is wrong)
        res = _lance_many(ds, [queries[i] for i in to_lance], columns, boosts, k, select,
                          [wheres[i] for i in to_lance], keys)
        for i, t in zip(to_lance, res):
            out[i] = t
    return out


def _lance_many(ds, queries, columns, boosts, k, select, wheres, keys) -> list[pa.Table]:
    from lance.query import MultiMatchQuery

    want = ["_score"] if keys is not None else [*select, "_score"]

    def one(q: str, where: str | None) -> pa.Table | None:
        if not q.strip():
            return None
        # lancedb prefilters a full-text query's `where`; Lance must be told (its default filters after)
        return ds.to_table(full_text_query=MultiMatchQuery(q, columns, boosts=boosts), columns=want,
                           with_row_id=keys is not None, limit=k, filter=where, prefilter=True if where else None)

    # a few threads (Lance releases the GIL): the calls overlap, the wall drops ~30%, the CPU stays
    res = list(_pool().map(one, queries, wheres)) if len(queries) > 1 else [one(queries[0], wheres[0])]
    if keys is not None:
        out = _take_keys([t if t is not None else _empty(["_rowid"]) for t in res], keys, select)
        if out is not None:
            return out
        return _lance_many(ds, queries, columns, boosts, k, select, wheres, None)
    return [t.select([*select, "_score"]) if t is not None else _empty(select) for t in res]


def _take_keys(res: list[pa.Table], keys: tuple[np.ndarray, pa.Table], select: list[str]) -> list[pa.Table] | None:
    """Row-id results -> `select` columns from the pinned version's rows in memory (None: an id is not there,
    never expected on a pinned version: the caller reads the columns instead)."""
    ids, cols = keys
    out = []
    for t in res:
        if not t.num_rows:
            out.append(_empty(select))
            continue
        want = t["_rowid"].to_numpy()
        pos = np.minimum(np.searchsorted(ids, want), len(ids) - 1)
        if not (ids[pos] == want).all():
            return None
        out.append(cols.take(pa.array(pos)).append_column("_score", t["_score"]))
    return out


def _empty(columns: list[str]) -> pa.Table:
    return pa.table({c: pa.array([], pa.string()) for c in columns})


def _pool():
    """The process's full-text call threads (min(4, cores)), made on first use."""
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        with _POOL_LOCK:
            if not _POOL:
                _POOL.append(ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="fanout-fts"))
    return _POOL[0]
