"""What `fanout index` last saw of each note file, `<db>/<collection>.files.arrow`: the stat fast path's record.

One row per note file of the vault (FILE_STATES): its stat when it was read (size, mtime_ns, inode, ctime_ns),
when it was read (`checked_ns`), and what its bytes gave: the content hash, or why the note was skipped. The next
run reads only the files whose stat differs (pipelines/scan_notes.py `scan_vault`); the others keep the recorded
hash. The record maps a file's stat to what its bytes were, so it holds whatever the index's tables hold: a stale
or missing record costs reads, never a wrong index.

Written after a run committed its manifest (and only when something in it changed); read at the start of the
next run. A run that walked the vault writes it whole, atomically; a watch round (given the paths it changed)
writes only the rows of those paths, into `<collection>.files.delta.arrow` (the changes since the whole file,
rewritten whole each round: small), until the delta holds more than COMPACT_EVERY of the record's rows: then the
whole file is written again and the delta removed. A delta names the whole file it follows (its checksum): one
left from before the whole file was rewritten (a run killed between the two) is ignored. A process keeps the
record it last read or wrote (`Record`) while the files on disk are the ones it saw (their size, mtime_ns,
ctime_ns and inode; local stores only), so a watcher's round does not parse the record again.

A record whose key differs (another vault, other scan settings, a newer scanner: see `key`) or that cannot be
read is ignored with a log line, and that run reads every file (a full check). Reached through
fanout/store/storage.py, so it lives next to the manifest on any store.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fanout.store import stamps, storage, version_files

if TYPE_CHECKING:
    from fanout.config import StorageConfig

log = logging.getLogger(__name__)

SUFFIX = ".files.arrow"
DELTA_SUFFIX = ".files.delta.arrow"
# a delta over this share of the record's rows is folded into a whole write: a round then writes (and a new
# process reads) at most this share again, while a whole write at 133,000 notes costs ~0.6 CPU-s (its rows made
# from Python tuples) once per that many changed notes
COMPACT_EVERY = 1 / 64
DELTA_ROWS = 256  # (and never fewer rows: a small vault's round writes a small file either way)
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


def delta_path(db: str | os.PathLike, name: str) -> str:
    """Where the rows changed since `path` was written whole live (module docstring)."""
    return storage.join(db, f"{name}{DELTA_SUFFIX}")


@dataclass
class Record:
    """The record as a scan reads it: `states` (path -> FILE_STATES row values), the content hash of each note
    that has one (`hashes`), the skipped notes, and `total`: the content sum of `hashes` (fanout.store.stamps),
    which a round compares with the manifest's `content` to know that the record holds what the index holds.

    A scan changes `states` and `hashes` in place: it `take`s the rows of the paths it lists and puts back what
    it finds; `update` (at `save`) then brings the rest up to date from the rows taken (O(paths taken))."""

    states: dict[str, tuple]
    hashes: dict[str, str]
    skipped: set[str]
    total: int
    racy_paths: dict[int, set[str]] = field(default_factory=dict)  # `racy`'s answers, kept up to date
    taken: dict[str, tuple] = field(default_factory=dict)  # rows a scan took out (`take`), until `update`
    folders: dict[str, int] = field(default_factory=dict)  # folder -> recorded paths under it (`has_under`)

    @classmethod
    def of(cls, states: dict[str, tuple]) -> Record:
        hashes = {p: r[6] for p, r in states.items() if r[6] is not None}
        folders: dict[str, int] = {}
        for p in states:
            _count(folders, p, 1)
        return cls(states, hashes, {p for p, r in states.items() if r[6] is None}, stamps.content_sum(hashes.items()),
                   folders=folders)

    def has_under(self, folder: str) -> bool:
        """Whether a recorded path lies under `folder` (a watch round's event for a new note costs no walk)."""
        return self.folders.get(folder, 0) > 0


    def take(self, paths: Iterable[str]) -> dict[str, tuple]:
        """Take the rows of `paths` out of `states` and `hashes` (a scan lists them again); returns them."""
        out = {p: self.states.pop(p) for p in paths if p in self.states}
        for p, r in out.items():
            self.hashes.pop(p, None)
            self.taken.setdefault(p, r)
        return out

    def update(self, paths: Iterable[str]) -> bool:
        """Bring `hashes`, `skipped`, `total` and the racy sets up to `states`, where only `paths` (with every
        path taken) changed; returns whether a row differs from the one taken."""
        differs = False
        for p in set(paths) | set(self.taken):
            was, new = self.taken.pop(p, None), self.states.get(p)
            differs = differs or was != new
            if (was is None) != (new is None):
                _count(self.folders, p, 1 if was is None else -1)
            self.hashes.pop(p, None)
            self.skipped.discard(p)
            if was is not None and was[6] is not None:
                self.total -= stamps.content_term(p, was[6])
            if new is not None and new[6] is not None:
                self.hashes[p] = new[6]
                self.total += stamps.content_term(p, new[6])
            elif new is not None:
                self.skipped.add(p)
            for racy_ns, racy in self.racy_paths.items():
                racy.discard(p)
                if new is not None and _racy(new, racy_ns):
                    racy.add(p)
        self.total %= 1 << 256
        return differs

    def racy(self, racy_ns: int) -> set[str]:
        """Paths recorded within `racy_ns` of their own mtime or ctime (pipelines/scan_notes.py: read again).
        Worked out once per record a process holds, then kept by `update`."""
        if racy_ns not in self.racy_paths:
            self.racy_paths[racy_ns] = {p for p, r in self.states.items() if _racy(r, racy_ns)}
        return set(self.racy_paths[racy_ns])


def _count(folders: dict[str, int], path: str, step: int) -> None:
    """Add `step` to the count of every folder above `path`."""
    at = path.find("/")
    while at != -1:
        folders[path[:at]] = folders.get(path[:at], 0) + step
        at = path.find("/", at + 1)


def _racy(row: tuple, racy_ns: int) -> bool:
    return not row[5] - racy_ns > max(row[2], row[4])


@dataclass
class _Held:
    """What a process keeps of a record it read or wrote (module docstring)."""

    key: str
    seen: tuple | None  # the files' identity on disk (`_identity`)
    record: Record
    base_rows: int  # rows of the whole file
    base_crc: str
    delta: dict[str, tuple | None]  # the delta's rows: path -> row values, or None where the path was removed
    lent: bool = False  # handed to a run (`load`), which changes it in place until it `save`s it


_HELD: dict[str, _Held] = {}


def _identity(db: str | os.PathLike, name: str) -> tuple | None:
    """The record's files as they are on a local disk (None on a remote store: nothing is kept there)."""
    where = path(db, name)
    if storage.is_remote(where):
        return None
    out: list[tuple[int, int, int, int] | None] = []
    for p in (where, delta_path(db, name)):
        try:
            st = os.stat(p)
            out.append((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


def _read(where: str, key: str, scfg: StorageConfig | None) -> pa.Table:
    t = pa.ipc.open_file(pa.BufferReader(storage.read_bytes(where, scfg))).read_all()
    meta = t.schema.metadata or {}
    if meta.get(b"fanout.key", b"").decode() != key:
        raise KeyError("other scan settings")
    if not t.schema.remove_metadata().equals(FILE_STATES):
        raise ValueError(f"schema {t.schema.remove_metadata()} is not {FILE_STATES}")
    t = t.combine_chunks()
    if meta.get(b"fanout.crc", b"").decode() != _crc(t):
        raise ValueError("a checksum differs (the file was changed or is damaged)")
    return t


def _rows(t: pa.Table) -> dict[str, tuple]:
    cols = [t[c].to_pylist() for c in t.column_names]
    return {r[0]: r for r in zip(*cols)}


def load(db: str | os.PathLike, name: str, key: str, scfg: StorageConfig | None = None) -> Record | None:
    """The recorded states when they were written under `key`; None when there are none, when the key differs,
    or when the file cannot be read (logged: the caller reads every file). The caller may change the record it
    gets (a scan does) and hands it back with `save`; until then this process reads the files again."""
    where = path(db, name)
    seen = _identity(db, name)
    held = _HELD.get(where)
    if held is not None and not held.lent and seen is not None and held.seen == seen and held.key == key:
        held.lent = True
        return held.record
    _HELD.pop(where, None)
    try:
        if not storage.exists(where, scfg):
            log.info("no file states at %s: every note is read (a full check)", where)
            return None
        t = _read(where, key, scfg)
    except KeyError:
        log.info("file states at %s were recorded under other scan settings: every note is read", where)
        return None
    except Exception as e:  # noqa: BLE001  a damaged record only costs a full check
        log.warning("file states at %s not used (%s): every note is read", where, e)
        return None
    states, base_crc = _rows(t), (t.schema.metadata or {})[b"fanout.crc"].decode()
    delta: dict[str, tuple | None] = {}
    dwhere = delta_path(db, name)
    try:
        if storage.exists(dwhere, scfg):
            d = _read(dwhere, key, scfg)
            if (d.schema.metadata or {}).get(b"fanout.base", b"").decode() != base_crc:
                raise ValueError("it follows another whole record (a run stopped while compacting)")
            delta = {p: (r if r[1] is not None else None) for p, r in _rows(d).items()}
    except Exception as e:  # noqa: BLE001  an older record costs reads, never a wrong index
        log.warning("file states delta at %s not used (%s): the notes it changed are read again", dwhere, e)
        delta = {}
    for p, r in delta.items():
        if r is None:
            states.pop(p, None)
        else:
            states[p] = r
    record = Record.of(states)
    if seen is not None:
        _HELD[where] = _Held(key, seen, record, t.num_rows, base_crc, delta, lent=True)
    return record


def save(db: str | os.PathLike, name: str, key: str, states: pa.Table | dict[str, tuple],
         scfg: StorageConfig | None = None, changed: Iterable[str] | None = None) -> None:
    """Record `states` (FILE_STATES rows, or path -> row values) under `key`. `changed` with the states of the
    record `load` gave this run: the only paths whose rows may differ from it; then only they are written (the
    delta) while it is small, and nothing when no row differs. Else the whole record. Never raises: a record
    that is not written costs the next run a full check (a warning)."""
    where = path(db, name)
    held = _HELD.pop(where, None)
    try:
        rows = states if isinstance(states, dict) else _rows(states.cast(FILE_STATES))
        small = changed is not None and held is not None and held.lent and held.record.states is rows and \
            held.key == key and held.seen == _identity(db, name)
        if small and held is not None and changed is not None:
            paths = set(changed) | set(held.record.taken)
            if held.record.update(paths):
                delta = {**held.delta, **{p: rows.get(p) for p in paths}}
                small = len(delta) <= max(DELTA_ROWS, COMPACT_EVERY * held.base_rows)
                if small:
                    t = _table([r if r is not None else (p, *[None] * 8) for p, r in sorted(delta.items())])
                    _write(delta_path(db, name), t, key, scfg, base=held.base_crc)
                    held.delta, held.seen = delta, _identity(db, name)
        if not small:
            t = _table([rows[p] for p in sorted(rows)])
            crc = _write(where, t, key, scfg)
            storage.remove_if_there(delta_path(db, name), scfg)  # (one left over is ignored: it names the old crc)
            held = _Held(key, _identity(db, name), Record.of(rows), t.num_rows, crc, {})
    except Exception as e:  # noqa: BLE001  the index is complete without it
        log.warning("file states of %s not written (%s); the next index run reads every note", name, e)
        return
    if held is not None and held.seen is not None:
        held.lent = False
        _HELD[where] = held


def keep(db: str | os.PathLike, name: str) -> None:
    """Hand back the record `load` gave this run, unchanged (nothing to write)."""
    held = _HELD.get(path(db, name))
    if held is not None and held.lent:
        if held.record.taken:  # a scan took rows out: what it put back is not known to be the same
            _HELD.pop(path(db, name), None)
        held.lent = False


def _table(rows: list[tuple]) -> pa.Table:
    names = FILE_STATES.names
    return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}, schema=FILE_STATES)


def _write(where: str, t: pa.Table, key: str, scfg: StorageConfig | None, base: str | None = None) -> str:
    """Write `t` under `key` (and the whole record's checksum `base`, for a delta); returns its checksum."""
    t = t.combine_chunks()
    crc = _crc(t)
    t = t.replace_schema_metadata({"fanout.key": key, "fanout.crc": crc, **({"fanout.base": base} if base else {})})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    storage.write_bytes(where, sink.getvalue().to_pybytes(), scfg)
    return crc


def remove(db: str | os.PathLike, name: str, scfg: StorageConfig | None = None) -> bool:
    """Delete the record (and its delta); True when there was one."""
    _HELD.pop(path(db, name), None)
    storage.remove_if_there(delta_path(db, name), scfg)
    return storage.remove_if_there(path(db, name), scfg)


def _crc(t: pa.Table) -> str:
    """CRC-32 of every buffer of `t`'s columns (one chunk each)."""
    parts = [memoryview(b) for c in t.columns for a in c.chunks for b in a.buffers() if b is not None]
    return version_files.crc32(parts)


def key(**parts: Any) -> str:
    """The key a record is written and read under: FORMAT plus what decides a file's scan result besides its bytes
    (the caller's scan settings, its scanner version, the vault)."""
    return json.dumps({"format": FORMAT, **parts}, sort_keys=True, default=str)
