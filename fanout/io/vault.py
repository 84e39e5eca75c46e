"""The vault as a boundary: which files are notes, and reading them without leaving the vault or blocking.

Rules (docs/security.md "Vault boundary"):
- Symlinks are followed only when they resolve inside the vault (its real path); a link that leads outside,
  or is broken, is skipped with a reason. A file link inside the vault is indexed under the link's path; a
  folder link inside it is not walked (its notes are indexed under their real path), so loops cannot occur,
  and every real folder is visited once.
- A symlink loop (a link to itself, or two pointing at each other) is skipped as `link_loop`, not as missing.
- A hard link is a name inside the vault like any other: its file is indexed, wherever else it is linked
  from (a hard link has no outside path to check; README "Threat model" says why that is the rule).
- Only regular files are opened: FIFOs, sockets and device files named `x.md` are skipped from their stat
  (never opened), and the open itself is `O_NONBLOCK | O_NOFOLLOW` with an `fstat` check, so a file swapped
  for a FIFO or a link after the walk is refused, not waited on.
- A name that is not valid UTF-8 is skipped with a reason naming it (undecodable bytes shown as `\\xNN`).
- Hidden files and folders (`.obsidian`, `.trash`, `.git`) are never notes; `.fanoutignore` (gitignore
  patterns, via `pathspec`) and Obsidian's "Excluded files" (`userIgnoreFilters` in `.obsidian/app.json`:
  path prefixes, or `/regex/`) exclude more.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from fanout.errors import UserError, VaultError

TYPE_CHECKING = False  # typing costs the CLI's warm path
if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

log = logging.getLogger(__name__)

IGNORE_FILE = ".fanoutignore"
RULE_FILES = (IGNORE_FILE, ".obsidian/app.json")  # hidden files whose change changes which notes are indexed
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = {stat.S_IFIFO: "FIFO (named pipe)", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
          stat.S_IFSOCK: "socket", stat.S_IFDIR: "folder"}


class NotARegularFile(OSError):
    """The path is a FIFO, device, socket or folder: it is never read."""


class OutsideVault(PermissionError):
    """The opened file resolves outside the vault (e.g. a link swapped in after the walk)."""


class TooLarge(OSError):
    """The file is over the size limit (index.max_note_mb)."""


def resolve_vault(vault: str | os.PathLike | None) -> Path:
    """The vault folder as given (checked): an empty or missing path is an error, never the current folder."""
    if vault is None or not str(vault).strip():
        raise VaultError("the vault path is empty; give the folder that holds the notes, e.g. `fanout index "
                         "~/Notes`")
    p = Path(vault).expanduser()
    if not p.exists():
        raise VaultError(f"vault {str(vault)!r} does not exist; give the folder that holds the notes")
    if not p.is_dir():
        raise VaultError(f"vault {str(vault)!r} is not a folder; give the folder that holds the notes")
    return p


def vault_paths(vault: str | os.PathLike, paths: object) -> set[str] | None:
    """`paths` (relative to the vault, or absolute inside it) as vault-relative `/` paths; None when one of them
    is the vault itself (then the whole vault is walked). A path outside the vault is refused (UserError)."""
    if isinstance(paths, (str, bytes, os.PathLike)) or not hasattr(paths, "__iter__"):
        raise UserError(f"`paths` must be a list of paths inside the vault, got {type(paths).__name__} "
                        f"{str(paths)[:80]!r}; e.g. paths=['notes/a.md']")
    given = os.path.abspath(os.path.expanduser(os.fspath(vault)))
    root = os.path.realpath(given)
    out: set[str] = set()
    for p in paths:
        if not isinstance(p, (str, os.PathLike)) or not os.fspath(p).strip():
            raise UserError(f"`paths` holds {p!r}, not a path; give note or folder paths inside the vault")
        s = os.fspath(p)
        full = os.path.normpath(os.path.expanduser(s) if os.path.isabs(os.path.expanduser(s))
                                else os.path.join(given, s))
        rel = None
        for base, at in ((given, full), (root, full), (root, os.path.join(os.path.realpath(os.path.dirname(full)),
                                                                          os.path.basename(full)))):
            if inside(at, base):
                rel = os.path.relpath(at, base)
                break
        if rel is None:
            raise UserError(f"path {shown(s)!r} is outside the vault {shown(given)}; give paths inside it "
                            "(relative to the vault, or absolute under it), or leave `paths` out to index the "
                            "whole vault")
        if rel in ("", "."):
            return None
        out.add(rel.replace(os.sep, "/"))
    return out


def shown(name: str) -> str:
    """A file name as valid UTF-8 text: bytes that are not UTF-8 (surrogate-escaped) become `\\xNN`."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def valid_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def too_long(path: str, is_dir: bool = False) -> str:
    """The SKIPPED detail of a path the system cannot open because it is longer than PATH_MAX."""
    try:
        limit = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        limit = 4096
    what = "its notes were not read" if is_dir else "it was not read"
    return (f"the path is {len(os.fsencode(path))} bytes, over the system's limit (PATH_MAX {limit}); {what}: "
            "move it to a shallower folder or shorten the folder names")


def _dir_entry(e: os.DirEntry) -> bool:
    try:
        return e.is_dir(follow_symlinks=False)  # from the listing's d_type; no stat of the long path
    except OSError:
        return False


def kind_of(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "special file")


def read_regular(path: str | os.PathLike, max_bytes: int, root: str | None = None) -> tuple[bytes, float]:
    """Read a regular file without following a final symlink or blocking on a FIFO: (bytes, mtime).

    Raises NotARegularFile for anything else, TooLarge over `max_bytes`, and OutsideVault when
    `root` is given and the opened file is not inside it (checked on the open descriptor where /proc exists).
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(f"a {kind_of(st.st_mode)}, not a regular file; it is not read")
        if root is not None and os.path.exists(f"/proc/self/fd/{fd}"):
            real = os.readlink(f"/proc/self/fd/{fd}")
            if not inside(real, root):
                raise OutsideVault(f"resolves outside the vault ({shown(real)}); it is not read")
        if st.st_size > max_bytes:
            raise TooLarge(f"{st.st_size / 1e6:.1f} MB is over the {max_bytes / 1e6:.1f} MB limit; raise "
                           "index.max_note_mb or split the note")
        parts, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            parts.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise TooLarge(f"over the {max_bytes / 1e6:.1f} MB limit; raise index.max_note_mb or split the "
                               "note")
        return b"".join(parts), st.st_mtime
    finally:
        os.close(fd)


@dataclass
class IgnoreRules:
    """`.fanoutignore` (gitignore syntax) plus Obsidian's `userIgnoreFilters`; paths are vault-relative."""

    spec: GitIgnoreSpec | None = None
    prefixes: tuple[str, ...] = ()
    regexes: tuple[re.Pattern, ...] = ()
    sources: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, root: str) -> IgnoreRules:
        rules = cls()
        text = _read_small(os.path.join(root, IGNORE_FILE), root)
        if text is not None:
            import pathspec

            rules.spec = pathspec.GitIgnoreSpec.from_lines(text.splitlines())
            rules.sources.append(IGNORE_FILE)
        raw = _read_small(os.path.join(root, ".obsidian", "app.json"), root)
        if raw is not None:
            try:
                filters = json.loads(raw).get("userIgnoreFilters") or []
                if not isinstance(filters, list):
                    raise TypeError("userIgnoreFilters is not a list")
            except (ValueError, AttributeError, TypeError) as e:
                log.warning(".obsidian/app.json: cannot read userIgnoreFilters (%s); no Obsidian exclusions "
                            "applied", e)
                filters = []
            prefixes, regexes = [], []
            for f in filters:
                if not isinstance(f, str) or not f.strip():
                    continue
                if len(f) > 2 and f.startswith("/") and f.endswith("/"):
                    try:
                        regexes.append(re.compile(f[1:-1]))
                    except re.error as e:
                        log.warning(".obsidian/app.json: excluded-files regex %r does not compile (%s); "
                                    "skipped", f, e)
                else:
                    prefixes.append(f.lstrip("/"))
            rules.prefixes, rules.regexes = tuple(prefixes), tuple(regexes)
            if filters:
                rules.sources.append(".obsidian/app.json userIgnoreFilters")
        return rules

    def ignored(self, rel: str, is_dir: bool = False) -> bool:
        if self.spec is None and not self.prefixes and not self.regexes:  # no rules (once per file of a walk)
            return False
        p = rel + "/" if is_dir else rel
        if self.spec is not None and self.spec.match_file(p):
            return True
        return any(p.startswith(x) for x in self.prefixes) or any(r.search(p) for r in self.regexes)


def _read_small(path: str, root: str) -> str | None:
    try:
        return read_regular(path, 1 << 20, root)[0].decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("%s: not read (%s)", shown(path), e)
        return None


@dataclass
class Listing:
    files: list[tuple[str, str]]  # (vault-relative path, real path to open)
    skipped: list[dict[str, str]]  # SKIPPED rows: path, reason, detail
    ignored: list[str] = field(default_factory=list)  # paths excluded by ignore rules (folders end in /)
    # vault-relative path -> (size, mtime_ns, inode, ctime_ns) of each file in `files`, from the walk's own
    # stat (the index's stat fast path compares them with what it recorded: pipelines/scan_notes.py)
    stats: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)


def _skip(out: Listing, rel: str, reason: str, detail: str) -> None:
    out.skipped.append({"path": shown(rel), "reason": reason, "detail": detail})


class _PathEntry:
    """One named path as the walk's `os.DirEntry` (name, path, is_symlink, stat, is_dir), from its own lstat: the
    first level of a walk limited to some paths (`list_notes(only=...)`)."""

    def __init__(self, path: str, st: os.stat_result):
        self.path, self.name, self._st = path, os.path.basename(path), st

    def is_symlink(self) -> bool:
        return stat.S_ISLNK(self._st.st_mode)

    def is_dir(self, follow_symlinks: bool = True) -> bool:
        return stat.S_ISDIR(self._st.st_mode)

    def stat(self, follow_symlinks: bool = True) -> os.stat_result:
        return self._st


def _walked_folder(root: str, rules: IgnoreRules, rel: str) -> bool:
    """Whether the full walk enters vault-relative folder `rel` by this name: a real folder (not a link), not
    hidden, not ignored, a UTF-8 name, and so are the folders above it."""
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        name, here = parts[i - 1], "/".join(parts[:i])
        if name.startswith(".") or not valid_utf8(name) or rules.ignored(here, True):
            return False
        try:
            if not stat.S_ISDIR(os.lstat(os.path.join(root, here)).st_mode):
                return False
        except OSError:
            return False
    return True


def list_notes(vault: str | os.PathLike, suffix: str = ".md", max_bytes: int | None = None,
               only: set[str] | None = None) -> Listing:
    """Every `*.md` note under the vault, walking real folders once, without leaving the vault.

    Files are returned in sorted order; what is not returned (and is a `.md` name) is in `skipped` with a
    reason, or listed in `ignored` (ignore rules; hidden names are not listed).

    `only` (vault-relative paths, `/`-separated, checked to be inside the vault): what the walk gives under those
    paths alone (a note, or a folder and everything under it), by the same rules; a path that is gone, or that
    the whole walk would not reach (under a hidden, ignored or linked folder), gives nothing.
    """
    root = os.path.realpath(resolve_vault(vault))
    rules = IgnoreRules.load(root)
    out = Listing([], [])
    st0 = os.stat(root)
    seen = {(st0.st_dev, st0.st_ino)}
    if only is None:
        _walk(out, rules, root, suffix, max_bytes, seen, [("", root, None)])
    else:
        for rel in sorted(only):
            parent, _, name = rel.rpartition("/")
            if not name or (parent and not _walked_folder(root, rules, parent)):
                continue
            full = os.path.join(root, rel)
            try:
                st = os.lstat(full)
            except FileNotFoundError:  # gone: nothing under it (its notes are deleted)
                continue
            except OSError:
                st = None
            if st is None:  # (unreadable: listed from its folder, as the whole walk sees it)
                with os.scandir(os.path.join(root, parent)) as it:
                    found = [e for e in it if e.name == name]
                _walk(out, rules, root, suffix, max_bytes, seen, [(parent + "/" if parent else "", "", found)])
            else:
                _walk(out, rules, root, suffix, max_bytes, seen,
                      [(parent + "/" if parent else "", "", [_PathEntry(full, st)])])
    out.files.sort(key=lambda f: f[0])
    if rules.sources:
        log.info("ignore rules from %s: %d paths ignored", ", ".join(rules.sources), len(out.ignored))
    return out


def _walk(out: Listing, rules: IgnoreRules, root: str, suffix: str, max_bytes: int | None,
          seen: set[tuple[int, int]], stack: list[tuple[str, str, list | None]]) -> None:
    """Walk `stack`'s (relative prefix, real folder, its entries or None to list it) depth-first into `out`."""
    while stack:
        prefix, real_dir, given = stack.pop()
        if given is not None:
            entries: list = given
        else:
            try:
                with os.scandir(real_dir) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as err:
                if err.errno == errno.ENAMETOOLONG:
                    _skip(out, prefix or ".", "path_too_long", too_long(real_dir, True))
                else:
                    _skip(out, prefix or ".", "unreadable", f"folder cannot be listed: {err.strerror or err}")
                continue
        subdirs: list[tuple[str, str, list | None]] = []
        for e in entries:
            name, rel = e.name, prefix + e.name
            is_link = False
            if name.startswith("."):
                continue
            full = e.path  # os.path.join(real_dir, name), made by scandir
            try:
                is_link = e.is_symlink()
                target = os.path.realpath(full) if is_link else full
                st = os.stat(target) if is_link else e.stat(follow_symlinks=False)
            except OSError as err:
                is_dir = _dir_entry(e)
                if err.errno == errno.ENAMETOOLONG and (is_dir or name.endswith(suffix)):
                    _skip(out, rel + ("/" if is_dir else ""), "path_too_long", too_long(full, is_dir))
                elif is_link and err.errno == errno.ELOOP and (name.endswith(suffix) or "." not in name):
                    _skip(out, rel, "link_loop", "symlink loop: following it leads back to a link already on "
                                                 "the way (itself or a link pointing back); fix or remove it")
                elif name.endswith(suffix) or is_dir:
                    _skip(out, rel + ("/" if is_dir else ""), "broken_link" if is_link else "unreadable",
                          f"{'symlink target is missing' if is_link else err.strerror or err}"
                          + ("; its notes were not read" if is_dir and not is_link else ""))
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if not is_dir and not name.endswith(suffix):
                continue
            if not valid_utf8(name):
                _skip(out, rel + ("/" if is_dir else ""), "bad_name",
                      ("folder" if is_dir else "file") + " name is not valid UTF-8 (bytes shown as \\xNN); "
                      "rename it" + ("; its notes were not read" if is_dir else ""))
                continue
            if is_link and not inside(target, root):
                _skip(out, rel + ("/" if is_dir else ""), "outside_vault",
                      f"symlink to {shown(target)}, outside the vault; only files inside the vault are read")
                continue
            if rules.ignored(rel, is_dir):
                out.ignored.append(shown(rel + ("/" if is_dir else "")))
                continue
            if is_dir:
                key = (st.st_dev, st.st_ino)
                if is_link or key in seen:  # a folder inside the vault is walked once, by its real path
                    log.debug("folder link %s not walked: its notes are indexed under their real path",
                              shown(rel))
                    continue
                seen.add(key)
                subdirs.append((rel + "/", target, None))
            elif not stat.S_ISREG(st.st_mode):
                _skip(out, rel, "not_regular_file", f"a {kind_of(st.st_mode)}, not a regular file; never opened")
            elif max_bytes is not None and st.st_size > max_bytes:
                _skip(out, rel, "too_large", f"{st.st_size / 1e6:.1f} MB is over the {max_bytes / 1e6:.1f} MB "
                                             "limit; raise index.max_note_mb or split the note")
            else:
                out.files.append((rel, target))
                out.stats[rel] = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        stack.extend(reversed(subdirs))  # depth-first, in name order
