"""Work done once per test run, however many pytest processes share it: a folder they all see, and a lock that
makes the first process to need a result build it while the others wait and then read it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# the folder that pytest processes started side by side share (scripts/test_models_and_ray.sh sets it)
SHARED_ENV = "FANOUT_TEST_SHARED_DIR"


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$FANOUT_TEST_SHARED_DIR where set, else the run's base temporary folder (under pytest-xdist, the one each
    worker's own `popen-gwN` lies in)."""
    if os.environ.get(SHARED_ENV):
        return Path(os.environ[SHARED_ENV])
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def held(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file `lock` (made if missing) across processes."""
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
