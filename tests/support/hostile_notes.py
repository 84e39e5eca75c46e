"""Hostile notes' helpers: a small good vault (GOOD) beside the hostile notes, a time- and memory-bounded runner,
the CLI's index run. Shared by the files the hostile round 3 was split into.
"""

from __future__ import annotations

import threading
import tracemalloc
from pathlib import Path


def bounded(fn, seconds: float = 60.0, max_mb: float = 200.0):
    """fn() in a thread, failing if it takes over `seconds` or allocates a peak over `max_mb` (tracemalloc)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (re-raised in the test thread)
            box["error"] = e

    tracemalloc.start()
    try:
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(seconds)
        peak = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    assert not t.is_alive(), f"did not finish in {seconds}s"
    assert peak < max_mb, f"peak memory {peak:.0f} MB (an alias bomb expanded?)"
    if "error" in box:
        raise box["error"]
    return box["value"]


GOOD = {f"good/note {i}.md": f"# Good {i}\nA good note number {i} about syncing and linking.\n" for i in range(5)}


def _index_cli(vault: Path, db: Path) -> list[str]:
    return ["index", str(vault), "--db", str(db), "-c", "t", "--config", "fake"]
