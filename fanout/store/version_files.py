"""Files fanout keeps next to a local index, one per table version (fanout/store/fts_postings.py: the memory
full-text postings; fanout/store/exact_file.py: the exact-search vectors): written whole or not at all, and
checked on load by a CRC-32 of their arrays."""

from __future__ import annotations

import contextlib
import os
import uuid
import zlib
from typing import Any

import pyarrow as pa

_WRITTEN: dict[str, tuple[int, int]] = {}  # path -> (size, mtime_ns) of the files this process wrote


def written_here(path: str) -> bool:
    """Whether this process wrote the file at `path` and it is unchanged since (same size and mtime): its
    checksum was computed from the arrays it was written from, so reading it back need not recompute it."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return _WRITTEN.get(path) == (st.st_size, st.st_mtime_ns)


def write_batch(path: str, batch: pa.RecordBatch) -> None:
    """`batch` as an Arrow IPC file at `path`, atomically: a temp file in the same folder, renamed over it (a
    reader sees the old file or the new one, never half of one); the temp file never outlives a failure."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with pa.OSFile(tmp, "wb") as f, pa.ipc.new_file(f, batch.schema) as w:
            w.write_batch(batch)
        os.replace(tmp, path)
        st = os.stat(path)
        _WRITTEN[path] = (st.st_size, st.st_mtime_ns)
        while len(_WRITTEN) > 256:
            _WRITTEN.pop(next(iter(_WRITTEN)))
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def crc32(parts: list[Any]) -> str:
    """CRC-32 over the bytes of `parts` (bytes-like objects), as 8 hex digits."""
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    return f"{crc:08x}"


def version_key(ds: Any) -> tuple | None:
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
