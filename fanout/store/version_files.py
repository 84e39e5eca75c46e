"""Files fanout keeps next to a local table, one per table version and column: the memory full-text engine's
postings (fanout/store/fts_postings.py, `<table>.postings/`) and exact search's vectors (fanout/store/
vectors_file.py, `<table>.exact/`). This module owns what the two share: where they live, how they are named,
fingerprinted, written, read back, checked and pruned; each kind says only what its fingerprint covers and what
its one record batch holds.

Where: `<db>/<table>.<kind>/<column>.v<version>.<fingerprint>.arrow`, local databases only (on an object store
each process builds or loads its own copy, as without the files). The fingerprint (16 hex digits of a SHA-256 of
the kind's key and format number) covers what the file's content depends on, so a file whose name does not match
is never opened, and a table dropped and made anew never matches an old file. Format: an Arrow IPC file, one
record batch, its fingerprint and a CRC-32 of its arrays in the schema metadata; the arrays are used in place
(zero copy from a memory map, the pages shared through the page cache). Written whole or not at all (a temporary
file, then a rename); a file that does not check out is ignored with a warning and rewritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import uuid
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from lance import LanceDataset

NAME = re.compile(r"^(?P<column>[A-Za-z0-9_]+)\.v(?P<version>\d+)\.(?P<fp>[0-9a-f]{16})\.arrow$")
_COLUMN = re.compile(r"[A-Za-z0-9_]+")
_WRITTEN: dict[str, tuple[int, int]] = {}  # path -> (size, mtime_ns) of the files this process wrote or checked
_JOBS: dict[str, threading.Thread] = {}  # table uri -> the last job `later` started for it
_JOBS_LOCK = threading.Lock()


def folder(ds: LanceDataset, kind: str) -> str | None:
    """`<table>.<kind>` next to the local table `ds`'s `<table>.lance` folder; None on an object store."""
    uri = str(ds.uri).removeprefix("file://").rstrip("/")
    if "://" in uri or not uri.endswith(".lance"):
        return None
    return uri[:-len(".lance")] + "." + kind


def fingerprint(fmt: int, key: dict[str, Any]) -> str:
    """The fingerprint of a file of format `fmt` whose content depends on `key` (JSON-able)."""
    return hashlib.sha256(json.dumps({"format": fmt, **key}, sort_keys=True, default=str).encode()).hexdigest()


def path(ds: LanceDataset, kind: str, column: str, fp: str) -> str | None:
    """The file of `column` at the version `ds` with fingerprint `fp`; None on an object store."""
    d = folder(ds, kind)
    if d is None or not _COLUMN.fullmatch(column):
        return None
    return os.path.join(d, f"{column}.v{int(ds.version)}.{fp[:16]}.arrow")


def older_versions(ds: LanceDataset, kind: str, column: str) -> list[int]:
    """The versions older than `ds`'s that have a file of `column` (what an update starts from), ascending."""
    d = folder(ds, kind)
    names = os.listdir(d) if d and os.path.isdir(d) else []
    return sorted({int(m["version"]) for n in names if (m := NAME.match(n)) and m["column"] == column
                   and int(m["version"]) < int(ds.version)})


def written_here(path: str) -> bool:
    """Whether this process wrote the file at `path`, or checked its checksum, and it is unchanged since (same
    size and mtime): reading it back need not recompute it (an index round's job reads the previous version's
    file again each round: 100 MB of vectors at 400,000 x 64)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return _WRITTEN.get(path) == (st.st_size, st.st_mtime_ns)


def crc32(parts: list[Any]) -> str:
    """CRC-32 over the bytes of `parts` (bytes-like objects), as 8 hex digits."""
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    return f"{crc:08x}"


def read(path: str, fp: str, schema: pa.Schema) -> pa.RecordBatch:
    """The one record batch of the file at `path`, memory-mapped (the arrays keep the map open); ValueError
    when it is not one batch of `schema` recorded with the fingerprint `fp` (the caller checks its CRC:
    `check_crc`)."""
    reader = pa.ipc.open_file(pa.memory_map(path))
    if reader.num_record_batches != 1:
        raise ValueError(f"{reader.num_record_batches} record batches, expected 1")
    batch = reader.get_batch(0)
    if (batch.schema.metadata or {}).get(b"fanout.fingerprint", b"").decode() != fp:
        raise ValueError("its recorded fingerprint differs from its name")
    if not batch.schema.remove_metadata().equals(schema):
        raise ValueError(f"schema {batch.schema.remove_metadata()} is not {schema}")
    return batch


def check_crc(path: str, batch: pa.RecordBatch, crc: Any) -> None:
    """ValueError unless the CRC recorded in `batch` is `crc()` (computed only for a file this process did not
    write itself: `written_here`)."""
    if written_here(path):
        return
    before = os.stat(path)
    if (batch.schema.metadata or {}).get(b"fanout.crc", b"").decode() != crc():
        raise ValueError("a checksum differs (the file was changed or is damaged)")
    after = os.stat(path)
    if (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns):
        _remember(path, after)  # (not a file renamed over it meanwhile)


def _remember(path: str, st: os.stat_result) -> None:
    """`path` (as `st` found it) as a file whose checksum this process knows (`written_here`)."""
    _WRITTEN[path] = (st.st_size, st.st_mtime_ns)
    while len(_WRITTEN) > 256:
        _WRITTEN.pop(next(iter(_WRITTEN)))


def write(path: str, batch: pa.RecordBatch, fp: str, crc: str) -> None:
    """`batch` with its fingerprint and CRC as the file at `path`, atomically: a temp file in the same folder,
    renamed over it (a reader sees the old file or the new one, never half of one); the temp file never
    outlives a failure."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    batch = batch.replace_schema_metadata({**(batch.schema.metadata or {}), "fanout.fingerprint": fp,
                                           "fanout.crc": crc})
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with pa.OSFile(tmp, "wb") as f, pa.ipc.new_file(f, batch.schema) as w:
            w.write_batch(batch)
        os.replace(tmp, path)
        _remember(path, os.stat(path))
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def prune(ds: LanceDataset, kind: str, column: str | None, keep: str | None = None, newer: bool = False) -> list[str]:
    """Remove the files of `column` (every column when None) of versions older than `ds`'s, and those of its
    version other than `keep` (a file name: superseded content). Newer versions' files are left to their
    writers unless `newer` (the version `ds` is then the only one kept: a table dropped and made anew numbers
    its versions from 1 again). Returns the names removed."""
    d = folder(ds, kind)
    if d is None or not os.path.isdir(d):
        return []
    version, gone = int(ds.version), []
    for name in os.listdir(d):
        m = NAME.match(name)
        if m is None or (column is not None and m["column"] != column):
            continue
        v = int(m["version"])
        if v < version or (v == version and keep is not None and name != keep) or (newer and name != keep):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(d, name))
                gone.append(name)
    return gone


def version_key(ds: LanceDataset) -> tuple | None:
    """What identifies the version of the local Lance dataset `ds` for a process's caches of what never changes
    within a version (its row ids, its index statistics): the uri, the version number and its manifest file's
    inode and mtime (a table dropped and made anew numbers its versions from 1 again). None on an object store
    or when the manifest file is not found (then nothing is cached)."""
    uri = str(ds.uri).removeprefix("file://")
    if "://" in uri:
        return None
    v = int(ds.version)
    for name in (f"{2**64 - 1 - v:020d}.manifest", f"{v}.manifest"):  # Lance's v2 and v1 manifest names
        try:
            st = os.stat(os.path.join(uri, "_versions", name))
        except OSError:
            continue
        return uri, v, st.st_ino, st.st_mtime_ns
    return None


def later(key: str, job: Callable[[], object], name: str) -> None:
    """Run `job` in a thread once the jobs started before for `key` (a table's uri) have ended: one at a time per
    table, each starting from the files the one before wrote. Not a daemon: a process that ends waits for it."""
    with _JOBS_LOCK:
        before = _JOBS.get(key)

        def run() -> None:
            if before is not None:
                before.join()
            job()

        t = threading.Thread(target=run, name=name)
        _JOBS[key] = t
        for k in [k for k, j in _JOBS.items() if not j.is_alive() and j is not t]:
            del _JOBS[k]
        t.start()


def wait(key: str | None = None) -> None:
    """Wait for the jobs `later` started for `key` (every table when None); a job's own thread never waits for
    itself."""
    with _JOBS_LOCK:
        pending = [t for k, t in _JOBS.items() if key is None or k == key]
    for t in pending:
        if t is not threading.current_thread():
            t.join()


def pending(key: str) -> bool:
    """Whether a job `later` started for `key` is still running or waiting."""
    with _JOBS_LOCK:
        t = _JOBS.get(key)
    return t is not None and t.is_alive()
