"""What `fanout index` last saw of each note file, `<db>/<collection>.files.arrow`: the stat fast path's record.

One row per note file of the vault (FILE_STATES): its stat when it was read (size, mtime_ns, inode, ctime_ns),
when it was read (`checked_ns`), and what its bytes gave: the content hash, or why the note was skipped. The next
run reads only the files whose stat differs (pipelines/scan_notes.py `scan_vault`); the others keep the recorded
hash. The record maps a file's stat to what its bytes were, so it holds whatever the index's tables hold: a stale
or missing record costs reads, never a wrong index.

Written whole, atomically, after a run committed its manifest (and only when something in it changed); read at
the start of the next run. A record whose key differs (another vault, other scan settings, a newer scanner: see
`key`) or that cannot be read is ignored with a log line, and that run reads every file (a full check). Reached
through fanout/store/storage.py, so it lives next to the manifest on any store.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fanout.store import storage, version_files

if TYPE_CHECKING:
    from fanout.config import StorageConfig

log = logging.getLogger(__name__)

SUFFIX = ".files.arrow"
FORMAT = 1  # bump when the layout changes: older records are then ignored (one full check)
FILE_STATES = pa.schema([
    ("path", pa.string()),  # vault-relative, NFC (as the documents table)
    ("size", pa.int64()),
    ("mtime_ns", pa.int64()),
    ("inode", pa.uint64()),
    ("ctime_ns", pa.int64()),
    ("checked_ns", pa.int64()),  # wall clock just before the file was read
    ("content_hash", pa.string()),  # sha256 of the bytes read; null when the note was skipped
    ("reason", pa.string()),  # SKIPPED reason and detail of a skipped note (null otherwise)
    ("detail", pa.string()),
])


def path(db: str | os.PathLike, name: str) -> str:
    """Where collection `name`'s file states live (a path or URI string, next to its manifest)."""
    return storage.join(db, f"{name}{SUFFIX}")


def load(db: str | os.PathLike, name: str, key: str, scfg: StorageConfig | None = None) -> pa.Table | None:
    """The recorded states (FILE_STATES) when they were written under `key`; None when there are none, when the
    key differs, or when the file cannot be read (logged: the caller reads every file)."""
    where = path(db, name)
    try:
        if not storage.exists(where, scfg):
            log.info("no file states at %s: every note is read (a full check)", where)
            return None
        data = storage.read_bytes(where, scfg)
        t = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        meta = t.schema.metadata or {}
        if meta.get(b"fanout.key", b"").decode() != key:
            log.info("file states at %s were recorded under other scan settings: every note is read", where)
            return None
        if not t.schema.remove_metadata().equals(FILE_STATES):
            raise ValueError(f"schema {t.schema.remove_metadata()} is not {FILE_STATES}")
        t = t.combine_chunks()
        if meta.get(b"fanout.crc", b"").decode() != _crc(t):
            raise ValueError("a checksum differs (the file was changed or is damaged)")
        return t
    except Exception as e:  # noqa: BLE001  a damaged record only costs a full check
        log.warning("file states at %s not used (%s): every note is read", where, e)
        return None


def save(db: str | os.PathLike, name: str, key: str, states: pa.Table, scfg: StorageConfig | None = None) -> None:
    """Write `states` (FILE_STATES) under `key`, whole (local: a temporary file and a rename). Never raises: a
    record that is not written costs the next run a full check (a warning)."""
    try:
        t = states.cast(FILE_STATES).combine_chunks()
        t = t.replace_schema_metadata({"fanout.key": key, "fanout.crc": _crc(t)})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, t.schema) as w:
            w.write_table(t)
        storage.write_bytes(path(db, name), sink.getvalue().to_pybytes(), scfg)
    except Exception as e:  # noqa: BLE001  the index is complete without it
        log.warning("file states of %s not written (%s); the next index run reads every note", name, e)


def remove(db: str | os.PathLike, name: str, scfg: StorageConfig | None = None) -> bool:
    """Delete the record; True when there was one."""
    return storage.remove_if_there(path(db, name), scfg)


def _crc(t: pa.Table) -> str:
    """CRC-32 of every buffer of `t`'s columns (one chunk each)."""
    parts = [memoryview(b) for c in t.columns for a in c.chunks for b in a.buffers() if b is not None]
    return version_files.crc32(parts)


def key(**parts: Any) -> str:
    """The key a record is written and read under: FORMAT plus what decides a file's scan result besides its bytes
    (the caller's scan settings, its scanner version, the vault)."""
    return json.dumps({"format": FORMAT, **parts}, sort_keys=True, default=str)
