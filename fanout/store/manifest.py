"""A collection's manifest, `<db>/<name>.manifest.json`: the one module that names, lists, reads, writes and
removes it.

URI-safe: every access goes through fanout/store/storage.py (pyarrow filesystems), so the same code serves a
local folder, `file://`, `s3://`, `gs://` and `az://`; never os.path, os.stat or pathlib. What a manifest must
hold is checked by fanout/store/integrity.py `parse_manifest`.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from fanout.store import storage
from fanout.store.integrity import IndexStateError, parse_manifest

if TYPE_CHECKING:
    from fanout.config import StorageConfig

SUFFIX = ".manifest.json"


def path(db: str | os.PathLike, name: str) -> str:
    """Where collection `name`'s manifest lives in `db` (a path or URI string, next to the tables)."""
    return storage.join(db, f"{name}{SUFFIX}")


def names(db: str | os.PathLike, scfg: StorageConfig | None = None) -> list[str]:
    """The collections of a db: one per manifest, sorted ([] when the db does not exist)."""
    return sorted(n.removesuffix(SUFFIX) for n in storage.list_dir(db, scfg) if n.endswith(SUFFIX) and n != SUFFIX)


def exists(db: str | os.PathLike, name: str, scfg: StorageConfig | None = None) -> bool:
    return storage.exists(path(db, name), scfg)


def read(db: str | os.PathLike, name: str, scfg: StorageConfig | None = None) -> dict[str, Any]:
    """The manifest as stored, unchecked ({} when missing, unreadable or not a JSON object)."""
    try:
        data = json.loads(storage.read_text(path(db, name), scfg))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_checked(db: str | os.PathLike, name: str, hint: str, scfg: StorageConfig | None = None
                 ) -> dict[str, Any] | None:
    """The manifest, checked (`parse_manifest`); None when there is none. IndexStateError (naming the file and
    `hint`, the command that rebuilds it) when it cannot be read or is not a valid manifest."""
    where = path(db, name)
    if not storage.exists(where, scfg):
        return None
    try:
        text = storage.read_text(where, scfg)
    except (OSError, UnicodeDecodeError) as e:
        raise IndexStateError(f"index manifest {where} cannot be read ({e}); rebuild the index with {hint}") from None
    return parse_manifest(text, where, hint)


def write(db: str | os.PathLike, name: str, manifest: dict[str, Any], scfg: StorageConfig | None = None) -> None:
    """One whole-object write (local: temporary file + atomic rename; an object store: one PUT)."""
    storage.write_text(path(db, name), json.dumps(manifest, indent=2, ensure_ascii=False), scfg)


def remove(db: str | os.PathLike, name: str, scfg: StorageConfig | None = None) -> bool:
    """Delete the manifest; True when there was one."""
    return storage.remove_if_there(path(db, name), scfg)


def stamp(db: str | os.PathLike, name: str, scfg: StorageConfig | None = None) -> int | None:
    """The manifest's modification time in ns (what a server compares to see a re-index), None when it is
    missing or the store gives no time."""
    import pyarrow.fs as pafs

    fs, p = storage.filesystem(path(db, name), scfg)
    try:
        info = fs.get_file_info(p)
    except OSError:
        return None
    if info.type == pafs.FileType.NotFound or info.mtime_ns is None:
        return None
    return int(info.mtime_ns)
