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


def write_batch(path: str, batch: pa.RecordBatch) -> None:
    """`batch` as an Arrow IPC file at `path`, atomically: a temp file in the same folder, renamed over it (a
    reader sees the old file or the new one, never half of one); the temp file never outlives a failure."""
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with pa.OSFile(tmp, "wb") as f, pa.ipc.new_file(f, batch.schema) as w:
            w.write_batch(batch)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def crc32(parts: list[Any]) -> str:
    """CRC-32 over the bytes of `parts` (bytes-like objects), as 8 hex digits."""
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    return f"{crc:08x}"
