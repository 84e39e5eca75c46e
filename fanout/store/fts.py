"""Full-text calls of a Collection (fanout/store/db.py): one BM25 search per query over the chunks table's
per-language columns, on one of three engines (`retrieve.fts_engine`).

- `memory` (the default): Lance's BM25 computed in numpy over postings built once per pinned version with
  Lance's own tokenizer (fanout/store/fts_memory.py): the same lists and scores, bit for bit, without a call into
  Lance (~1.4 ms of CPU each); a prefilter is evaluated by Lance once per filter and version (a row mask),
  the search over the rows it keeps in memory. A column whose index this engine does not reproduce goes to
  Lance as below.
- `lance`: each search is one call into Lance itself (pylance, the Lance release lancedb embeds, pinned
  together in pyproject: the same index files, tokenizers and BM25, identical lists; tested in
  tests/test_fts_rowids.py), a few at a time on min(4, cores) threads (Lance releases the GIL). About 20% less
  CPU a call than lancedb's query builder and its asyncio loop (docs/performance.md#query-cost).
- `lancedb`: lancedb queries gathered on lancedb's own loop (async gather is ~2x faster than a loop there).

Either way a search that wants only `path` / `chunk_id` asks for row ids and takes those columns from the
pinned version's rows in memory (`Collection.row_keys`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from fanout.text import nfc

if TYPE_CHECKING:
    from fanout.store.db import Collection

log = logging.getLogger(__name__)
_POOL: list[Any] = []
_POOL_LOCK = threading.Lock()
_SHARED: OrderedDict[tuple[str, int], _State] = OrderedDict()  # (chunks table uri, version) -> its state
_SHARED_LOCK = threading.RLock()


def search_many(col: Collection, queries: list[str], columns: list[str], boosts: list[float], k: int,
                select: list[str], wheres: list[str | None] | None = None) -> list[pa.Table]:
    """One full-text search per query (`select` + `_score` each); `wheres[i]` is query i's prefilter
    (fanout/filters.py), None for none."""
    if not queries:  # no connection for nothing (a warm interactive query pays ~25 ms for one)
        return []
    queries = [nfc(q) if q else q for q in queries]  # the FTS columns hold NFC text (write_index)
    wheres = wheres or [None] * len(queries)
    with col.guard(col.chunks_name):
        keys = col.row_keys(tuple(select)) if set(select) <= {"path", "chunk_id"} else None
        ds = lance_chunks(col)
        if ds is not None and keys is not None and col.cfg is not None and col.cfg.retrieve.fts_engine == "memory":
            mem = memory_columns(col, ds, columns, keys[0])
            if mem is not None:
                return _memory_many(ds, mem, queries, columns, boosts, k, select, wheres, keys)
            state, t = _shared(ds), time.process_time()
            try:
                return _lance_many(ds, queries, columns, boosts, k, select, wheres, keys)
            finally:
                state.lance_cpu_s += time.process_time() - t
        if ds is not None:
            return _lance_many(ds, queries, columns, boosts, k, select, wheres, keys)
        handle = getattr(col.table(col.chunks_name), "_table", None)  # the sync table's AsyncTable
        if handle is not None and hasattr(handle, "query"):
            from lancedb.background_loop import LOOP

            # on lancedb's own loop, with the open (pinned) table: no new loop, connection or open per call
            return LOOP.run(_lancedb_many(col, queries, columns, boosts, k, select, wheres, handle, keys))
        return asyncio.run(_lancedb_many(col, queries, columns, boosts, k, select, wheres, None, keys))


def lance_chunks(col: Collection):
    """The chunks table's pinned version as a Lance dataset (`Collection.dataset`), or None when
    `retrieve.fts_engine` is `lancedb`."""
    if col.cfg is not None and col.cfg.retrieve.fts_engine == "lancedb":
        return None
    return col.dataset(col.chunks_name)


def memory_columns(col: Collection, ds, columns: list[str], ids: np.ndarray) -> list | None:
    """The `memory` engine's postings of `columns` on the pinned version `ds`, None when one of them is not
    served from memory (fanout/store/fts_memory.py says why) or not built yet. They are built once this process's
    Lance calls on this version have cost `retrieve.fts_memory_after` times what the build is estimated to
    cost (BUILD_S_PER_CELL a chunk and column), unless `retrieve.fts_postings_file` finds them in a file of
    this version (fanout/store/fts_postings.py: loaded at the first call; written after a build): a one-off search of a large index never waits for a build it
    would not pay back, a batch builds after its first call, and it never spends more than twice the cheaper
    of the two choices (1.0: the ski-rental rule). Shared by every Collection of the process on that version
    (the in-process loop's ProbeBM25 and Retrieve build them once)."""
    from fanout.store import fts_postings
    from fanout.store.fts_memory import BUILD_S_PER_CELL, memory_column

    state = _shared(ds)
    use_file = col.cfg.retrieve.fts_postings_file and fts_postings.folder(col) is not None
    if use_file and not all(c in state.columns or c in state.tried for c in columns):
        with _SHARED_LOCK:  # a postings file of this version: used from the first call, nothing built
            for c in columns:
                if c not in state.columns and c not in state.tried:
                    state.tried.add(c)
                    if (m := fts_postings.load(col, ds, c, ids)) is not None:
                        state.columns[c] = m
    if not all(c in state.columns for c in columns) and \
            state.lance_cpu_s < col.cfg.retrieve.fts_memory_after * len(ids) * len(columns) * BUILD_S_PER_CELL:
        return None
    with _SHARED_LOCK:
        for c in columns:
            if c not in state.columns:
                try:
                    state.columns[c] = memory_column(col, ds, c, ids)
                except Exception as e:  # noqa: BLE001  Lance itself still answers: a build must never fail a search
                    log.warning("full-text column %s of %s: postings not built (%s); Lance answers its searches",
                                c, col.name, e)
                    state.columns[c] = None
                if use_file and state.columns[c] is not None:  # the next process loads what this one built
                    fts_postings.save(col, ds, c, ids, state.columns[c])
    out = [state.columns[c] for c in columns]
    return None if any(m is None for m in out) else out


@dataclass
class _State:
    """This process's memory-engine state of one chunks table version."""

    lance_cpu_s: float = 0.0  # CPU its Lance full-text calls have cost (weighed against a build)
    columns: dict[str, Any] = field(default_factory=dict)  # column -> MemoryColumn, None: Lance answers it
    tried: set[str] = field(default_factory=set)  # columns whose postings file was looked for
    masks: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict)  # prefilter -> rows it keeps


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
            allowed = _allowed(ds, ids, wheres[i])
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
    return out  # type: ignore[return-value]


def _allowed(ds, ids: np.ndarray, where: str) -> np.ndarray | None:
    """The rows (a bool per pinned row) that pass `where`, evaluated by Lance on the pinned version once per
    filter and version (the last 64 kept); None when Lance cannot evaluate it here."""
    with _SHARED_LOCK:
        masks = _shared(ds).masks
        if where not in masks:
            try:
                got = ds.to_table(columns=[], with_row_id=True, filter=where)["_rowid"].to_numpy()
            except Exception:  # noqa: BLE001  the Lance call below raises it with its own message
                return None
            pos = np.searchsorted(ids, got)
            if len(got) and not (ids[np.minimum(pos, len(ids) - 1)] == got).all():
                return None
            masks[where] = np.zeros(len(ids), bool)
            masks[where][pos] = True
            while len(masks) > 64:
                masks.popitem(last=False)
        masks.move_to_end(where)
        return masks[where]


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


async def _lancedb_many(col: Collection, queries, columns, boosts, k, select, wheres, tbl=None, keys=None
                        ) -> list[pa.Table]:
    import lancedb
    from lancedb.query import MultiMatchQuery

    if keys is not None:  # ask for row ids only; the columns come from the pinned version's rows in memory
        res = await _lancedb_many(col, queries, columns, boosts, k, ["_rowid"], wheres, tbl)
        out = _take_keys(res, keys, select)
        if out is None:  # never expected on a pinned version: read the columns
            return await _lancedb_many(col, queries, columns, boosts, k, ["path", "chunk_id"], wheres, None)
        return out
    if tbl is None:
        db = await lancedb.connect_async(col.db_dir, storage_options=col.storage_options or None)
        tbl = await db.open_table(col.chunks_name)
        if version := col.pinned.get(col.chunks_name):  # the same version as every other read
            await tbl.checkout(version)

    async def one(q: str, where: str | None) -> pa.Table:
        if not q.strip():
            return _empty(select)
        query = tbl.query().nearest_to_text(MultiMatchQuery(q, columns, boosts=boosts))
        if where:
            query = query.where(where)
        return await query.select(select).limit(k).to_arrow()

    return list(await asyncio.gather(*(one(q, w) for q, w in zip(queries, wheres))))


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
