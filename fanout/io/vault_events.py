"""A vault's file events, in batches: what `--watch` reacts to (fanout/api/watcher.py runs one index round per batch).

The events come from watchfiles (Rust `notify`: inotify, FSEvents, ReadDirectoryChangesW; no polling loop of
ours). `VaultEvents` is the filter: it keeps only the events that can change what `fanout index` would index,
by the vault scanner's own rules (fanout/io/vault.py, docs/security.md "Vault boundary"):

- a `.md` name, a folder that appeared (created, or moved in with its notes: one event for the whole folder),
  or a folder that held notes and is gone (moved away or removed: again one event, none for its notes);
- `.fanoutignore` and `.obsidian/app.json` (they change which notes are indexed);
- nothing under a hidden name (`.obsidian/`, `.git/`, `.trash/`, an editor's `.note.md.swp`), nothing the
  ignore rules exclude, and nothing whose real path leaves the vault (a symlink pointing out of it, or a path
  through one): such an event never starts a round, and the round's scan refuses the link anyway.

A temporary file an editor writes and renames over a note is not a `.md` name (or is gone by the time the
round scans), so an atomic save is one edit of the note.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from fanout.errors import InputMissing
from fanout.io.vault import RULE_FILES, IgnoreRules, inside, list_notes, resolve_vault

log = logging.getLogger(__name__)

KINDS = {1: "added", 2: "modified", 3: "deleted"}  # watchfiles.Change values


class VaultEvents:
    """The watch filter of one vault: `events(change, path)` is True for an event that can change the index.

    `reload()` re-reads the ignore rules and the folders that hold notes (call it after each round)."""

    def __init__(self, vault: str | os.PathLike, suffix: str = ".md"):
        self.root = os.path.realpath(resolve_vault(vault))
        self.suffix = suffix
        self.rules = IgnoreRules()
        self.folders: set[str] = set()  # vault-relative folders that held notes at the last reload
        self.links: set[str] = set()  # vault-relative notes that are file links (their target's edit is theirs)
        self.rescan = True  # set when the OS watch (re)starts: events may have been missed (the caller clears it)
        self.reload()

    def reload(self, changed: Iterable[str] | None = None) -> None:
        """Re-read the ignore rules, and the folders that hold notes and the file links: by a walk of the whole
        vault, or when `changed` (vault-relative paths of a round's events) is given, only at those paths."""
        self.rules = IgnoreRules.load(self.root)
        if changed is None:
            folders: set[str] = set()
            links: set[str] = set()
            for rel, real in list_notes(self.root, self.suffix).files:
                parts = rel.split("/")[:-1]
                for i in range(1, len(parts) + 1):
                    folders.add("/".join(parts[:i]))
                if real != os.path.join(self.root, rel):
                    links.add(rel)
            self.folders, self.links = folders, links
            return
        for rel in changed:
            gone = {f for f in self.folders | self.links if f == rel or f.startswith(rel + "/")}
            self.folders -= gone
            self.links -= gone
            full = os.path.join(self.root, rel)
            if os.path.islink(full):
                self.links.add(rel)
            if os.path.isdir(full) and not os.path.islink(full):  # (every folder under it: a few too many
                self.folders.add(rel)  # folders is one event too many, never one missed)
                for here, dirs, names in os.walk(full):
                    dirs[:] = [d for d in dirs if not d.startswith(".")]
                    base = os.path.relpath(here, self.root).replace(os.sep, "/")
                    self.folders.update(f"{base}/{d}" for d in dirs)
                    self.links.update(f"{base}/{n}" for n in names
                                      if n.endswith(self.suffix) and os.path.islink(os.path.join(here, n)))
            parts = rel.split("/")[:-1]
            if os.path.exists(full):
                self.folders.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))

    def rel(self, path: str) -> str | None:
        """`path` relative to the vault (with `/`), None when it is not under the vault's folder."""
        if not inside(path, self.root) or path == self.root:
            return None
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def __call__(self, change: int, path: str) -> bool:
        if path == self.root:  # the vault folder itself removed or moved away: `batches` moves the watch
            return int(change) == 3
        rel = self.rel(path)
        if rel is None:
            return False
        if any(part.startswith(".") for part in rel.split("/")):  # hidden: never notes (as the scanner)
            return rel in RULE_FILES
        if not inside(os.path.realpath(path), self.root):  # a link out of the vault, or a path through one
            return False
        try:
            is_dir = stat.S_ISDIR(os.lstat(path).st_mode)  # a link to a folder is not walked by the scanner
        except OSError:  # gone (deleted, renamed away): known as a folder only if it held notes
            is_dir = rel in self.folders
        if self.rules.ignored(rel, is_dir):
            return False
        # a note, or a folder that came with its notes; not another kind of file (an image, an editor's temp file)
        return rel.endswith(self.suffix) or is_dir

    def identity(self) -> tuple[int, int] | None:
        """The vault folder's (device, inode); None while there is none. A folder made anew at the vault's path
        (`rm -rf vault; mkdir vault`, `mv vault old; mkdir vault`) has another, and the OS watch, which stays
        on the old one, must be put on it."""
        try:
            st = os.stat(self.root)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def watch_plan(self) -> tuple[tuple[str, ...], bool]:
        """(the folders to put the OS watch on, recursively or not). The vault alone, recursively, unless a folder
        link is inside it: the OS watch would walk what the link leads to when the watch starts (a link to `/`: a
        watch on every folder of the system, and a user's inotify budget spent); then each real folder of the
        vault on its own, hidden ones left out but `.obsidian` (its app.json holds ignore rules)."""
        folders, linked = [], False
        for here, dirs, _ in os.walk(self.root):  # never into a link (followlinks=False)
            keep = []
            for d in dirs:
                path = os.path.join(here, d)
                if os.path.islink(path):
                    linked = True
                elif not d.startswith(".") or os.path.join(self.root, ".obsidian") == path:
                    keep.append(d)
            dirs[:] = keep
            folders.append(here)
        return ((self.root,), True) if not linked else (tuple(folders), False)

    def shown(self, changes: Iterable[tuple[int, str]]) -> list[tuple[str, str]]:
        """watchfiles' changes as sorted (kind, vault-relative path) pairs."""
        out = {(KINDS.get(int(c), str(c)), self.rel(p) or p) for c, p in changes}
        return sorted(out, key=lambda x: (x[1], x[0]))


def batches(events: VaultEvents, stop: threading.Event, *, step_ms: int, debounce_ms: int,
            tick_ms: int) -> Iterator[list[tuple[str, str]]]:
    """Batches of the vault's relevant events, as (kind, vault-relative path) pairs, until `stop` is set.

    A batch closes once `step_ms` passed without a new event, or `debounce_ms` after its first; events that come
    while the caller works on a batch are kept for the next one. An empty batch is a tick: every `tick_ms`
    without events (the watch is in place from the first one on).

    A vault folder made anew at its path is one ("replaced", ".") change, and the watch moves to it; a folder that
    came (or went) while folder links are in the vault puts the watch on the folders as they are now
    (`VaultEvents.watch_plan`)."""
    import watchfiles

    owed: list[tuple[str, str]] = []  # changes seen before a restart, given with the new watch's first batch
    while not stop.is_set():
        born = events.identity()
        if born is None:
            raise InputMissing(f"the vault folder {events.root} is gone")
        paths, recursive = events.watch_plan()
        events.rescan = True
        for changes in watchfiles.watch(*map(Path, paths), watch_filter=events, debounce=debounce_ms, step=step_ms,
                                        stop_event=stop, rust_timeout=tick_ms, yield_on_timeout=True,
                                        raise_interrupt=False, ignore_permission_denied=True, recursive=recursive):
            if stop.is_set():
                return
            if events.identity() != born or any(p == events.root for _, p in changes):  # (a folder made anew
                # may reuse the old one's inode) these events may be the old folder's: a round scans the new one,
                log.info("the vault folder %s was replaced: watching the new one", events.root)
                owed = [("replaced", ".")]  # once the watch is on it (nothing written meanwhile is missed)
                break
            shown = sorted(set(owed + events.shown(changes)), key=lambda x: (x[1], x[0]))
            if any(kind == "added" and os.path.isdir(os.path.join(events.root, rel)) or
                   kind == "deleted" and not recursive for kind, rel in shown) and \
                    events.watch_plan() != (paths, recursive):
                owed = shown
                break  # watch the folders as they are now, then give this batch
            owed = []
            yield shown
