"""What a failed write to one of a collection's tables leaves behind, removed (`Collection.writing`): the
files a write wrote before it failed are referenced by no table version, so nothing else would ever remove them."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil

from fanout.store import storage

log = logging.getLogger(__name__)


class WriteGuard:
    """`Collection`'s `writing`: the files a failed write left are removed (local folders only)."""

    db_dir: str

    def _open(self, name: str, version: int | None = None):  # (Collection's)
        raise NotImplementedError

    def forget(self, name: str) -> None:  # (Collection's)
        raise NotImplementedError

    @contextlib.contextmanager
    def writing(self, name: str):
        """Around ONE write to table `name` (create, add, delete, index build): if it fails before it commits a
        new table version, the files it wrote are deleted. No version references them, so nothing else ever
        would (a failed run on a full disk would otherwise keep the space it took). Local folders only."""
        if storage.scheme(self.db_dir) != "file":
            yield
            return
        root = os.path.join(self.db_dir, f"{name}.lance")
        existed = os.path.isdir(root)
        before = _entries(root)
        version = self._latest_version(name) if existed else None
        try:
            yield
        except Exception:  # not KeyboardInterrupt: Lance may still be finishing that write in its own thread
            self._reclaim(name, root, existed, before, version)
            raise

    def _latest_version(self, name: str) -> int | None:
        try:
            return int(self._open(name).version)
        except Exception:  # noqa: BLE001  (no table, or one without a readable version)
            return None

    def _reclaim(self, name: str, root: str, existed: bool, before: set[str], version: int | None) -> None:
        try:
            self.forget(name)
            now = self._latest_version(name)
            if now is not None and now != version:
                return  # the write committed; its files belong to the new version
            if not existed and now is None:
                size = sum(os.path.getsize(os.path.join(root, f)) for f in _tree(root))
                shutil.rmtree(root, ignore_errors=True)
                log.warning("removed %s (%.1f MB) left by a failed create of table %s", root, size / 1e6, name)
                return
            new = sorted(_entries(root) - before)  # no new version was committed: none of these is referenced
            size = files = 0
            for f in new:
                p = os.path.join(root, f)
                with contextlib.suppress(OSError):
                    if os.path.isdir(p) and not os.path.islink(p):  # a whole new index folder
                        got = [os.path.join(p, x) for x in _tree(p)]
                        size += sum(os.path.getsize(x) for x in got)
                        files += len(got)
                        shutil.rmtree(p)
                    else:
                        size += os.path.getsize(p)
                        files += 1
                        os.remove(p)
            if new:
                log.warning("removed %d files (%.1f MB) that a failed write to table %s left in %s", files,
                            size / 1e6, name, root)
        except Exception as e:  # noqa: BLE001  (cleaning up must never hide the write's own error)
            log.warning("could not remove what a failed write to %s left: %s", name, e)


def _entries(root: str) -> set[str]:
    """The entries of `root` and of its folders, one level down ('data/x.lance', '_indices/<uuid>'): where a write
    adds its files (a new index is one new folder), without walking every file of every index."""
    out: set[str] = set()
    try:
        top = list(os.scandir(root))
    except OSError:
        return out
    for e in top:
        out.add(e.name)
        if e.is_dir(follow_symlinks=False):
            with contextlib.suppress(OSError), os.scandir(e.path) as it:
                out.update(f"{e.name}/{x.name}" for x in it)
    return out


def _tree(root: str) -> set[str]:
    """Every file under `root`, relative to it ('/'-separated); empty when it does not exist."""
    out: set[str] = set()
    for dirpath, _, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out.update(f if rel == "." else f"{rel}/{f}".replace(os.sep, "/") for f in files)
    return out
