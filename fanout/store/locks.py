"""One writer per collection: `fanout index` (and `collection remove`, `optimize`) hold a lock on it.

Two `fanout index` runs on one collection would both write its tables; Lance keeps each table consistent
(one commit wins, the other fails), but the loser stopped with a raw storage error (a commit conflict,
"already exists", a Rust source path). With the lock the second run stops before it writes anything, in one
line that names the holder (pid, command, start time) and what to do.

Local dbs: `flock` on `<db>/.<collection>.writer-lock` (0600, opened without following links; not `.lock`,
the cache writers' suffix, fanout/store/caches.py). The kernel drops the
lock when its holder exits, even by kill -9, so a stale lock file never blocks anyone; the file is left in
place (deleting a lock file races with the next run's open). flock also holds across NFS v4 clients on Linux.
Object-store dbs (`s3://`, `gs://`, `az://`) have no such lock: run one writer per collection (one scheduled
job); a second writer's commit conflict is still caught by Lance and the index stays consistent (README
"Integrity").
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator

from fanout.errors import CollectionBusy  # declared there; importable from here as it was
from fanout.store import storage


def lock_path(db_dir: str | os.PathLike, collection: str) -> str | None:
    """`<db>/.<collection>.writer-lock` for a local db; None for an object store (no lock)."""
    uri = storage.normalize_uri(db_dir)
    if storage.scheme(uri) != "file":
        return None
    return os.path.join(uri, f".{collection}.writer-lock")


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
        os.lseek(fd, 0, os.SEEK_SET)
        info = json.loads(os.read(fd, 4096).decode("utf-8"))
        if isinstance(info, dict):
            when = time.strftime("%H:%M:%S", time.localtime(float(info.get("started", 0))))
            return f"`{str(info.get('command', 'fanout'))[:40]}` (pid {int(info.get('pid', 0))}, since {when})"
    return "another fanout process"


@contextlib.contextmanager
def collection_lock(db_dir: str | os.PathLike, collection: str, command: str) -> Iterator[None]:
    """Hold `collection`'s writer lock for the block, or raise CollectionBusy at once (one line: who holds it
    and what to do). `command` names this run for the message another run prints."""
    path = lock_path(db_dir, collection)
    if path is None:
        yield
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise CollectionBusy(
                f"collection {collection!r} in {os.path.dirname(path)} is being written by {_holder(fd)}; "
                f"wait for it to finish (or stop it), then run `{command}` again") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": command, "started": time.time()}).encode())
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
