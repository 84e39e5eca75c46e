"""The memory full-text engine's postings (fanout/store/fts_memory.py) as one file per index version and column,
memory-mapped by every process instead of built by each.

Building a column's postings costs ~0.04-0.08 ms of CPU a chunk (10-12 CPU-s a process at 60,000 chunks over the
columns a search uses); loading them from this file costs tens of ms and the pages are shared through the page
cache (docs/performance.md#query-cost-at-scale). Written by `fanout index` (and `fanout optimize`) for the version
they pin (an index round's by a job after it returns: `load_or_update`), and by any process that built them itself
(fanout/store/fts.py memory_columns); read at a process's first full-text call when `retrieve.fts_postings_file`
is on.

Where, naming, writing, checking and pruning: fanout/store/version_files.py (kind `postings`:
`<db>/<collection>_chunks.postings/<column>.v<version>.<fingerprint>.arrow`). The fingerprint covers what the
postings depend on: the table version, the index's tokenizer parameters, document and token counts and build time,
the row count and a hash of the pinned row ids (the row positions in the file are positions in that order). A file
that matches is checked (its recorded fingerprint, a CRC-32 of every array, offsets and row positions in range).

The record batch: a row per token: `token` (string), `rows` (large_list<int32>: the row positions, ascending)
and `freq` (large_list<int32>: the term frequency in each), the lists sharing their offsets; `dl`
(large_list<uint32>): the first token's entry holds every row's token count (what the scores' document lengths
are, read instead of summed from the postings at each load), the others none. No scores: every
BM25 contribution depends on the version's document count and average length, so a file that held them would
be recomputed whole for every added or deleted row; each process computes a token's at its first use
(fanout/store/fts_memory.py `MemoryColumn`), the same bits a build gives.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from fanout.store import version_files
from fanout.store.fts_delta import DeltaColumn
from fanout.store.fts_memory import Column, MemoryColumn

if TYPE_CHECKING:
    from lance import LanceDataset

log = logging.getLogger(__name__)
KIND = "postings"
FORMAT = 3  # bump when the layout changes: older files then never match a name (3: no contributions)
# (table uri, column) -> the newest postings this process's `ensure` updated (`_Fresh`)
_FRESH: dict[tuple[str, str], _Fresh] = {}
_FRESH_LOCK = threading.Lock()
_IDS_HASH: dict[tuple, str] = {}  # (*version_key, row count) -> the hash of its row ids (the last few)
_SCHEMA = pa.schema([("token", pa.string()), ("rows", pa.large_list(pa.int32())),
                     ("freq", pa.large_list(pa.int32())), ("dl", pa.large_list(pa.uint32()))])


def folder(ds: LanceDataset) -> str | None:
    """Where the postings files of the chunks table `ds` live; None on an object store (not kept there)."""
    return version_files.folder(ds, KIND)


def fingerprint(ds: LanceDataset, column: str, ids: np.ndarray) -> tuple[str, dict[str, Any]] | None:
    """(the fingerprint of `column`'s postings on the version `ds` in the row order `ids`, the index's
    tokenize args), None when the memory engine does not reproduce the column's index."""
    from fanout.store.fts_index_meta import index_meta

    got = index_meta(ds, column)
    if isinstance(got, str):
        return None
    args, meta, st = got
    key = {"column": column, "version": int(ds.version), "params": meta.get("params"),
           "num_docs": meta.get("num_docs"), "num_tokens": meta.get("num_tokens"),
           "updated": st.get("updated_at_timestamp_ms"), "rows": len(ids), "ids": ids_hash(ds, ids)}
    return version_files.fingerprint(FORMAT, key), args


def ids_hash(ds: LanceDataset, ids: np.ndarray) -> str:
    """SHA-256 of the row ids `ids` (the version `ds`'s, sorted), computed once per version in this process (a
    version's rows never change; an index round asks for every column's fingerprint several times)."""
    version = version_files.version_key(ds)
    key = None if version is None else (*version, len(ids), int(ids[0]) if len(ids) else -1,
                                        int(ids[-1]) if len(ids) else -1)
    got = _IDS_HASH.get(key) if key is not None else None
    if got is None:
        got = hashlib.sha256(np.ascontiguousarray(ids, "<u8").tobytes()).hexdigest()
        if key is not None:
            _IDS_HASH[key] = got
            while len(_IDS_HASH) > 8:
                _IDS_HASH.pop(next(iter(_IDS_HASH)))
    return got


def _fresh_key(ds: LanceDataset, column: str, ids: np.ndarray) -> tuple | None:
    version = version_files.version_key(ds)
    return None if version is None else (*version, ids_hash(ds, ids))


def load_or_update(ds: LanceDataset, column: str, ids: np.ndarray) -> Column | None:
    """What a search uses (fanout/store/fts.py): `column`'s postings for the version `ds`: those this process's
    index round made (`ensure`, waited for when it is still at work: fanout/store/version_files.py `later`), else
    the version's file, else (a version published before its file is written) this process's postings of an
    older version or an older version's file brought to this one in memory (only the rows added are tokenized:
    fts_delta.py, the same postings), kept as this process's postings; None when there is none of these."""
    version_files.wait(job_key(ds))
    key = _fresh_key(ds, column, ids)
    with _FRESH_LOCK:
        fresh = _FRESH.get((str(ds.uri), column))
    if key is not None and fresh is not None and fresh.key == key:
        return fresh.mem
    got = load(ds, column, ids)
    if got is not None:
        return got
    updated = _from_previous(ds, column, ids, {}, fresh)  # (from this process's older postings: the rows since)
    if updated is None:
        return None
    if fresh is None or fresh.version < int(ds.version):  # the next version starts from these (never an older)
        _keep_fresh(ds, column, ids, *updated)
    return updated[0]


@dataclass
class _Fresh:
    """Postings `ensure` made for a version (this process's searches use them, the next round starts from them)."""

    key: tuple  # `_fresh_key` of the version
    version: int
    ids: np.ndarray  # its sorted row ids
    mem: Column  # (a DeltaColumn while the file is older)
    since_file: int  # rows added and deleted since the newest file of the column (0: written)


def _keep_fresh(ds: LanceDataset, column: str, ids: np.ndarray, mem: Column, since_file: int) -> None:
    """`mem` kept for this process's searches of the version `ds` (`load_or_update`): no file read back."""
    key = _fresh_key(ds, column, ids)
    if key is None:
        return
    with _FRESH_LOCK:  # the newest version's only: a process keeps no two copies of a column
        _FRESH[(str(ds.uri), column)] = _Fresh(key, int(ds.version), ids, mem, since_file)


def job_key(ds: LanceDataset) -> str:
    """The key of the background jobs that write the postings files of the table `ds` (version_files.later)."""
    return f"{ds.uri}#{KIND}"


def load(ds: LanceDataset, column: str, ids: np.ndarray) -> MemoryColumn | None:
    """`column`'s postings from its file for the version `ds` and row order `ids`; None when there is none
    (or none for this version, index and rows), or when it is damaged (a warning: the caller builds them)."""
    got = fingerprint(ds, column, ids)
    if got is None:
        return None
    fp, args = got
    path = version_files.path(ds, KIND, column, fp)
    if path is None or not os.path.isfile(path):
        return None
    try:
        batch = version_files.read(path, fp, _SCHEMA)
        tokens, rows, offsets, freq, dl = _arrays(batch)
        version_files.check_crc(path, batch, lambda: _crc(tokens, rows, offsets, freq, dl))
        if offsets[0] != 0 or offsets[-1] != len(rows) or (len(offsets) > 1 and (np.diff(offsets) <= 0).any()):
            raise ValueError("its offsets are not increasing from 0 to the postings' length")
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= len(ids)):
            raise ValueError(f"a row position is outside 0..{len(ids) - 1}")
        ends = offsets.tolist()
        slices = dict(zip(tokens.to_pylist(), itertools.pairwise(ends)))
        if len(slices) != len(tokens):
            raise ValueError("a token appears twice")
        if len(tokens) and len(dl) != len(ids):
            raise ValueError(f"{len(dl)} document lengths for {len(ids)} rows")
    except Exception as e:  # noqa: BLE001  a bad file must never fail a search: the postings are built instead
        log.warning("full-text postings file %s is not used (%s); the postings are built instead and the file "
                    "rewritten", path, e)
        return None
    return MemoryColumn(args, slices, rows, None, len(ids), freq, dl if len(tokens) else None)


def _arrays(batch: pa.RecordBatch) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, rows, offsets, freq, dl) of a postings batch, zero copy; ValueError when they do not fit."""
    tokens, rows, freq, dl = batch.column(0), batch.column(1), batch.column(2), batch.column(3)
    if tokens.null_count or rows.null_count or freq.null_count or dl.null_count or rows.offset or freq.offset \
            or dl.offset:
        raise ValueError("null or offset arrays")
    offsets = rows.offsets.to_numpy()
    if not np.array_equal(offsets, freq.offsets.to_numpy()):
        raise ValueError("rows and freq have different offsets")
    r, f, d = rows.values, freq.values, dl.values
    if r.null_count or f.null_count or d.null_count or len(r) != len(f):
        raise ValueError("rows and freq differ in length")
    if len(d) and dl.offsets.to_numpy()[1] != len(d):
        raise ValueError("the document lengths are not the first token's entry")
    return (tokens, r.to_numpy(zero_copy_only=True), offsets, f.to_numpy(zero_copy_only=True),
            d.to_numpy(zero_copy_only=True))


def _crc(tokens: pa.Array, rows: np.ndarray, offsets: np.ndarray, freq: np.ndarray, dl: np.ndarray) -> str:
    """CRC-32 of every array the postings use (the tokens' offsets and bytes included)."""
    toff = np.frombuffer(tokens.buffers()[1], np.int32, len(tokens) + 1, tokens.offset * 4)
    data = tokens.buffers()[2]
    parts = [toff.tobytes(), memoryview(data)[toff[0]:toff[-1]] if data is not None else b"",
             *(np.ascontiguousarray(a).reshape(-1).data.cast("B") for a in (rows, offsets, freq, dl))]
    return version_files.crc32(parts)


def save(ds: LanceDataset, column: str, ids: np.ndarray, mem: Column) -> str | None:
    """Write `mem` (built from the version `ds` in the row order `ids`) as `column`'s postings file, atomically,
    and remove the column's files of older versions. Returns its path; None on an object store or when the
    index is not one the memory engine reproduces. Never raises (a warning: the postings stay in memory)."""
    try:
        got = fingerprint(ds, column, ids)
        path = version_files.path(ds, KIND, column, got[0]) if got is not None else None
        if path is None or got is None:
            return None
        path_key = got[0]
        mem = mem.folded() if isinstance(mem, DeltaColumn) else mem
        assert isinstance(mem, MemoryColumn)
        tokens = list(mem.slices)
        bounds = np.array([mem.slices[t] for t in tokens], np.int64).reshape(-1, 2)
        if len(bounds) and (bounds[0, 0] != 0 or (bounds[1:, 0] != bounds[:-1, 1]).any()
                            or bounds[-1, 1] != len(mem.rows)):
            raise ValueError("the postings are not one contiguous run per token")
        offsets = pa.array(np.concatenate([[0], bounds[:, 1]]).astype(np.int64))
        tok = pa.array(tokens, pa.string())
        if mem.freq is None:
            raise ValueError("the postings hold no term frequencies")
        r, f = np.asarray(mem.rows, np.int32), np.asarray(mem.freq, np.int32)
        d = np.asarray(mem.dl, np.uint32) if len(tokens) else np.zeros(0, np.uint32)
        rows = pa.LargeListArray.from_arrays(offsets, pa.array(r))
        freq = pa.LargeListArray.from_arrays(offsets, pa.array(f))
        dl_ends = np.full(len(tokens) + 1, len(d), np.int64)
        dl_ends[0] = 0
        dl = pa.LargeListArray.from_arrays(pa.array(dl_ends), pa.array(d, pa.uint32()))
        crc = _crc(tok, r, offsets.to_numpy(), f, d)
        batch = pa.record_batch([tok, rows, freq, dl], names=["token", "rows", "freq", "dl"]
                                ).replace_schema_metadata({"fanout.rows": str(len(ids))})
        version_files.write(path, batch, path_key, crc)
        version_files.prune(ds, KIND, column, keep=os.path.basename(path))
        log.info("wrote the full-text postings of %s v%d to %s (%.1f MB)", column, int(ds.version), path,
                 os.path.getsize(path) / 1e6)
        return path
    except Exception as e:  # noqa: BLE001  the file only saves later processes a build
        log.warning("full-text postings of %s not written to a file (%s); each process builds them", column, e)
        return None


def ensure(ds: LanceDataset, columns: list[str], rowid_map_rows: int, share: float = 0.0) -> dict[str, str]:
    """The postings files of `columns` for the pinned chunks version `ds`: each kept when a valid one is there,
    else built (or updated from this process's postings of an older version, or an older version's file) and
    written, and every other version's files removed (what `fanout index` and `fanout optimize` call last).
    `share` (`index.query_files_share`, an index round): updated postings are kept in memory only, not written,
    while the rows added and deleted since the column's newest file are fewer than this share of the rows (the
    older file stays; a process without them brings it up to date: `load_or_update`). The memory engine serves
    at most `rowid_map_rows` rows (`retrieve.rowid_map_rows`). Returns column -> `kept` / `written` /
    `updated` / `in memory` / why not."""
    from fanout.store.chunk_rows import sorted_row_ids
    from fanout.store.fts_memory import memory_column

    if folder(ds) is None:
        return {c: "object store: built per process" for c in columns}
    if not rowid_map_rows or ds.count_rows() > rowid_map_rows:  # (Collection.row_keys: the memory engine's order)
        return {c: "above retrieve.rowid_map_rows: the memory engine is not used" for c in columns}
    ids = sorted_row_ids(ds)
    out = {}
    previous: dict[str, Any] = {}  # the older version's dataset and row ids, read once for every column
    for c in columns:
        if load(ds, c, ids) is not None:
            out[c] = "kept"
            got = fingerprint(ds, c, ids)
            assert got is not None  # a file was loaded: the column's index is one the engine reproduces
            path = version_files.path(ds, KIND, c, got[0])
        else:
            with _FRESH_LOCK:
                held = _FRESH.get((str(ds.uri), c))
            updated = _from_previous(ds, c, ids, previous, held)
            mem, since, how = (updated[0], updated[1], "updated") if updated is not None else \
                (memory_column(ds, c, ids), 0, "written")
            if mem is not None and how == "updated" and since < share * len(ids):
                _keep_fresh(ds, c, ids, mem, since)  # the older file stays: nothing pruned
                out[c] = f"in memory ({since} rows since the file)"
                continue
            path = save(ds, c, ids, mem) if mem is not None else None
            if mem is not None and how == "updated":  # (a round's: its process searches them next)
                if path is not None and isinstance(mem, DeltaColumn):
                    mem = mem.folded()  # (what the file holds: the next round starts from it)
                _keep_fresh(ds, c, ids, mem, since if path is None else 0)
            out[c] = "not reproduced by the memory engine" if mem is None else (how if path else "not written")
        version_files.prune(ds, KIND, c, keep=os.path.basename(path) if path else None, newer=True)
    return out


def _from_previous(ds: LanceDataset, column: str, ids: np.ndarray, previous: dict[str, Any],
                   held: _Fresh | None = None) -> tuple[Column, int] | None:
    """(`column`'s postings for the version `ds`, the rows added and deleted since the column's newest file)
    from `held` (this process's postings of an older version, when no file is newer) or else the newest older
    version's file, as a fts_delta.DeltaColumn on those (only the rows added since are tokenized, nothing else is
    copied; folded into one run per token when written: `save`); None when there is no usable one (the caller
    builds from every row). Never raises."""
    import lance

    from fanout.store.chunk_rows import row_steps, sorted_row_ids, take_rows
    from fanout.store.fts_delta import updated_column
    from fanout.store.fts_index_meta import index_meta

    try:
        if isinstance(index_meta(ds, column), str):
            return None
        older = version_files.older_versions(ds, KIND, column)
        if held is not None and (held.version >= int(ds.version) or (older and held.version < older[-1])):
            held = None  # (a newer file than it, or not older than `ds`)
        if not older and held is None:
            return None
        version = held.version if held is not None else older[-1]
        if previous.get("version") != (version, held is not None):
            old_ds = None if held is not None else lance.dataset(ds.uri, version=version)
            old_ids = held.ids if held is not None else sorted_row_ids(old_ds)
            step, at = row_steps(old_ids, ids)  # (both sorted: no set operations)
            previous.clear()
            previous.update(version=(version, held is not None), ds=old_ds, ids=old_ids, new=ids[at], at=at,
                            step=step, gone=int((step < 0).sum()))
        old = held.mem if held is not None else load(previous["ds"], column, previous["ids"])
        if old is None:
            return None
        new = previous["new"]
        if 2 * len(new) > len(ids):  # most rows new (a rebuild, a compaction): one scan is cheaper
            return None
        texts = take_rows(ds, new.astype(np.int64), [column])[column].to_pylist() if len(new) else []
        mem = updated_column(old, previous["ids"], ids, list(zip(previous["at"].tolist(), texts)), previous["step"])
        if mem is None:
            return None
        log.info("full-text postings of %s v%d from v%d: %d rows added, %d gone", column, int(ds.version),
                 version, len(new), previous["gone"])
        return mem, (held.since_file if held is not None else 0) + len(new) + previous["gone"]
    except Exception as e:  # noqa: BLE001  the full build remains
        log.warning("full-text postings of %s not updated from the previous version (%s); built anew", column, e)
        return None
