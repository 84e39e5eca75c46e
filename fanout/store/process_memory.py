"""This process's heap, for an index run's memory peak (index.malloc_arenas, docs/performance.md#index-rounds):
glibc's malloc arenas capped before Lance's threads start, freed memory handed back between stages, and how
far a whole-column scan of a Lance table reads ahead (LEAN_SCAN)."""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import Any

log = logging.getLogger(__name__)
_ARENAS: list[int] = []  # the M_ARENA_MAX this process set (limit_malloc_arenas), once


def _glibc() -> ctypes.CDLL | None:
    """The C library this process runs on when it is glibc (arenas, malloc_trim); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
    except OSError as e:
        log.debug("no C library handle: %s", e)
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None  # (musl has no arenas, no malloc_trim)


def limit_malloc_arenas(n: int) -> None:
    """Cap glibc's malloc arenas at `n` for this process (mallopt M_ARENA_MAX), once; nothing when n <= 0, when
    MALLOC_ARENA_MAX is set (the user's choice), or off glibc. Threads that start later share the arenas there
    are instead of each keeping one of its own."""
    if n <= 0 or _ARENAS or "MALLOC_ARENA_MAX" in os.environ:
        return
    _ARENAS.append(n)
    libc = _glibc()
    if libc is not None:
        libc.mallopt(-8, n)  # M_ARENA_MAX


def release_memory() -> None:
    """Hand the memory freed so far back to the system: pyarrow's pool's unused pages and glibc's free heap
    pages (malloc_trim), so the next stage (Lance's index builds) grows from what is live, not on top of what
    the writes left in the allocators."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


# what a whole-column scan of a Lance table may read ahead (LanceDataset.scanner's options): Lance's defaults
# read up to its io buffer (GBs) ahead and left ~250 MB in the allocators after one 60,000 x 768 vector column
LEAN_SCAN: dict[str, Any] = {"batch_size": 2048, "batch_readahead": 2, "fragment_readahead": 1, "io_buffer_size": 8 << 20}
