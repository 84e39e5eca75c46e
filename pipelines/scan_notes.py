"""Stage: scan a vault for markdown notes and parse their front matter.

The vault is a boundary (fanout/io/vault.py): symlinks are followed only inside it, only regular files are
opened (never blocking), link loops end, names that are not UTF-8 are skipped. Bad files (non-UTF-8 text,
binary, empty, unreadable, too large, broken YAML, outside the vault, FIFO/device) are reported with path and
reason and skipped; ignored paths (`.fanoutignore`, Obsidian's excluded files) come back with reason
`ignored`; everything else is returned.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import re
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from fanout.config.safe_yaml import YAMLLimitError, load_bounded
from fanout.config.sections import IndexConfig
from fanout.config.vocab import LANG_NAMES
from fanout.filters import inline_tags, prop_values
from fanout.io.vault import (
    NotARegularFile,
    OutsideVault,
    TooLarge,
    list_notes,
    read_regular,
    shown,
    too_long,
)
from fanout.schemas import NOTES, SKIPPED
from fanout.store.file_states import Record
from fanout.text import detect_lang, nfc

log = logging.getLogger(__name__)

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?\r?\n)?---[ \t]*(\r?\n|\Z)", re.DOTALL)
_H1 = re.compile(r"^# +(.+?)\s*#*\s*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~)")


def list_markdown(vault: Path) -> list[Path]:
    """All `*.md` notes under `vault` that would be read (inside the vault, regular files), in path order."""
    return [Path(vault) / rel for rel, _ in list_notes(vault).files]


def _as_list(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()] if "," in value else (
            [value.strip()] if value.strip() else [])
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if v is not None and str(v).strip()]
    return [str(value)]


def _first_h1(body: str) -> str | None:
    in_fence = False
    for line in body.splitlines():
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
        elif not in_fence and (m := _H1.match(line)):
            return m.group(1).strip()
    return None


_LIMIT_KNOBS = {"depth": "index.front_matter_max_depth", "size": "index.front_matter_max_chars"}


def _front_matter(block: str, limits: IndexConfig) -> dict[str, Any]:
    try:
        loaded = load_bounded(block, limits.front_matter_max_depth, limits.front_matter_max_chars) or {}
    except YAMLLimitError as e:
        knob = _LIMIT_KNOBS.get(e.kind)
        raise ValueError("bad_yaml", f"front matter is refused: {e}; simplify it"
                         + (f" (or raise {knob})" if knob else "")) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ValueError("bad_yaml", f"front matter does not parse{where}: {getattr(e, 'problem', e)}") from None
    if not isinstance(loaded, dict):
        raise ValueError("bad_yaml", f"front matter is a {type(loaded).__name__}, not a mapping")  # noqa: TRY004
    return loaded


def _bounded(field: str, values: list[str], limit: int) -> list[str]:
    """The values of one front matter field, refused (bad_front_matter) when they hold over `limit` chars."""
    size = sum(len(v) for v in values)
    if size > limit:
        raise ValueError("bad_front_matter", f"front matter `{field}` holds {size} characters, over "
                         f"index.max_field_chars {limit}; shorten it (or raise index.max_field_chars)")
    return values


def note_lang(value: object, fallback: str, rel: str) -> str:
    """A front matter `lang` as a known language code (LANG_NAMES): `en`, `EN`, `en-US`, `English`; anything
    else is logged and the note gets `fallback` (the detected or configured language)."""
    if value is None or value == "":
        return fallback
    if isinstance(value, str) and len(value) <= 40:
        v = value.strip().casefold()
        code = v.replace("_", "-").split("-", 1)[0]
        if code in LANG_NAMES:
            return code
        for code, name in LANG_NAMES.items():
            if v == name.casefold():
                return code
    shown_value = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    log.warning("%s: front matter `lang` %s is not a language code of %s; using %r", rel, shown_value,
                sorted(LANG_NAMES), fallback)
    return fallback


def parse_note(rel: str, raw: bytes, mtime: float, default_lang: str = "auto",
               limits: IndexConfig | None = None) -> dict[str, Any]:
    """Parse one note's bytes into a NOTES row; raises ValueError(reason, detail) for a bad file.

    `limits` (index config; default: its defaults) bounds the front matter: nesting depth, size with YAML
    aliases expanded, and the characters of each field taken into the index.
    """
    limits = limits or IndexConfig()
    if not raw.strip():
        raise ValueError("empty", "file has no text")
    if b"\x00" in raw[:8192]:
        raise ValueError("binary", "file contains NUL bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError("not_utf8", f"byte {e.start}: {e.reason}; re-save the file as UTF-8") from None
    text = text.lstrip("\ufeff")
    meta: dict[str, Any] = {}
    body_offset = 0
    if m := _FRONT.match(text):
        meta = _front_matter(m.group(1) or "", limits)
        body_offset = m.end()
    body = text[body_offset:]
    name = rel.rsplit("/", 1)[-1][:-3]
    title = nfc(_first_h1(body) or name)  # title, aliases and tags in one normal form, like the path
    lang = default_lang if default_lang != "auto" else detect_lang(body or title)
    cap = limits.max_field_chars
    description = meta.get("description")
    return {
        "path": rel,
        "title": title,
        "aliases": _bounded("aliases", [nfc(a) for a in _as_list(meta.get("aliases", meta.get("alias")))], cap),
        "tags": _bounded("tags", [nfc(t.lstrip("#")) for t in _as_list(meta.get("tags", meta.get("tag")))], cap),
        "description": _bounded("description", [str(description) if description else ""], cap)[0],
        "lang": note_lang(meta.get("lang"), lang, rel),
        "body": body,
        "body_offset": body_offset,
        "content_hash": hashlib.sha256(raw).hexdigest(),
        "mtime": mtime,
        "props": _bounded("properties", prop_values(meta), cap),
        "inline_tags": inline_tags(body),
    }


IGNORED = "ignored"  # SKIPPED reason of paths excluded by ignore rules (not a problem: no exit 3)


def scan_notes(vault: str | Path, default_lang: str = "auto", max_note_mb: float = 20.0,
               limits: IndexConfig | None = None) -> tuple[pa.Table, pa.Table]:
    """Scan a vault, reading every note. Returns (notes: NOTES, skipped: SKIPPED); raises VaultError for an
    unusable vault path.

    Paths are NFC (what macOS writes as NFD is indexed, searched and filtered in one form); a file whose
    name differs from another's only by normal form is skipped (`duplicate_name`), keeping the one whose name
    is already NFC. Skipped files are logged at DEBUG only: the caller reports them (`fanout index` prints
    each once). `limits` (the index config) bounds front matter and fields (parse_note).
    """
    scan = scan_vault(vault, default_lang, max_note_mb, limits)
    return scan.notes, scan.skipped


# what a file's recorded state depends on besides its bytes: bump when parse_note's result changes for the
# same bytes (the next run then reads every note once)
SCANNER_VERSION = 1


def scan_key(vault: str | Path, default_lang: str, max_note_mb: float, limits: IndexConfig | None) -> str:
    """The key of a vault's file states (fanout/store/file_states.py): the settings that decide a note's scan
    result besides its bytes."""
    from fanout.store import file_states

    limits = limits or IndexConfig()
    return file_states.key(scanner=SCANNER_VERSION, vault=str(Path(vault).expanduser().resolve()),
                           default_lang=default_lang, max_note_mb=max_note_mb,
                           front_matter=[limits.front_matter_max_depth, limits.front_matter_max_chars],
                           max_field_chars=limits.max_field_chars)


@dataclass
class VaultScan:
    """One scan of a vault (`scan_vault`): every note file's content hash, from its bytes or, where its stat is
    the one recorded, from the record; the NOTES rows of the files read (`read` adds more)."""

    root: str
    files: dict[str, str]  # NFC path -> real path to open
    stats: dict[str, tuple[int, int, int, int]]  # NFC path -> (size, mtime_ns, inode, ctime_ns) of the walk
    hashes: dict[str, str] = field(default_factory=dict)  # every note that is not skipped -> its content hash
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # NOTES rows of the notes read
    skips: dict[str, dict[str, str]] = field(default_factory=dict)  # path -> SKIPPED row (listing or parse)
    ignored: list[str] = field(default_factory=list)
    states: dict[str, tuple] = field(default_factory=dict)  # path -> FILE_STATES row values (read or kept)
    read_count: int = 0  # files read and hashed by this scan
    trusted: int = 0  # files whose hash came from the record (stat unchanged)
    changed_states: bool = False  # the states differ from the record they were loaded from
    partial: bool = False  # listed only some paths (scan_vault's `paths`): the record stands for the rest
    touched: set[str] | None = None  # partial: the paths whose state may differ from the record (None: all)
    before: dict[str, str | None] = field(default_factory=dict)  # partial: their recorded hashes (None: skipped)
    max_bytes: int = 0
    default_lang: str = "auto"
    limits: IndexConfig | None = None

    @property
    def notes(self) -> pa.Table:
        """NOTES rows of the notes read, in path order."""
        return pa.Table.from_pylist([self.rows[p] for p in sorted(self.rows)], schema=NOTES)

    @property
    def skipped(self) -> pa.Table:
        rows = [self.skips[p] for p in sorted(self.skips)]
        rows += [{"path": p, "reason": IGNORED, "detail": "matches an ignore rule"} for p in self.ignored]
        return pa.Table.from_pylist(rows, schema=SKIPPED)

    def read(self, paths: set[str] | list[str]) -> None:
        """Read, parse and hash `paths` (notes of this scan not read yet; others are left as they are)."""
        for rel in sorted(paths):
            if rel in self.rows or rel not in self.files:
                continue
            self.rows.pop(rel, None)
            self.hashes.pop(rel, None)
            self.skips.pop(rel, None)
            if rel in self.states:
                self.trusted -= 1
            self.states.pop(rel, None)
            self.read_file(rel)

    def read_file(self, rel: str) -> None:
        """Read, parse and hash one listed note (`rel`), recording its state (a read error or a bad note: its
        skip reason)."""
        real = self.files[rel]
        checked = time.time_ns()
        self.read_count += 1
        self.changed_states = True
        reason = None
        try:
            raw, mtime = read_regular(real, self.max_bytes, self.root)
            row = parse_note(rel, raw, mtime, self.default_lang, self.limits)
            self.rows[rel], self.hashes[rel] = row, row["content_hash"]
        except (NotARegularFile, OutsideVault, TooLarge) as e:
            kinds = {NotARegularFile: "not_regular_file", OutsideVault: "outside_vault", TooLarge: "too_large"}
            self.skips[rel] = {"path": rel, "reason": kinds[type(e)], "detail": str(e)}
            return  # decided by the file's kind and place, not its bytes: not recorded
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                self.skips[rel] = {"path": rel, "reason": "path_too_long", "detail": too_long(real)}
            else:
                self.skips[rel] = {"path": rel, "reason": "unreadable", "detail": e.strerror or str(e)}
            return
        except ValueError as e:
            reason, detail = e.args if len(e.args) == 2 else ("bad_file", str(e))
            self.skips[rel] = {"path": rel, "reason": str(reason), "detail": str(detail)}
        except RecursionError:  # the depth limit should prevent it; one note never stops the scan
            self.skips[rel] = {"path": rel, "reason": "bad_yaml", "detail": "front matter is nested too deeply "
                               "to read; simplify it (or lower index.front_matter_max_depth)"}
        except MemoryError:
            self.skips[rel] = {"path": rel, "reason": "too_large", "detail": "reading it ran out of memory; "
                               "split the note or simplify its front matter"}
            return
        except Exception as e:  # anything else one note's text raises: skip it, keep the rest
            log.debug("parsing %s failed", rel, exc_info=True)
            self.skips[rel] = {"path": rel, "reason": "bad_file", "detail": f"cannot be parsed "
                               f"({type(e).__name__}: {str(e)[:200]}); check its front matter"}
        st = self.stats.get(rel)
        if st is not None:  # the walk's stat, taken before the read: a change during the read shows next time
            skip = self.skips.get(rel)
            self.states[rel] = (rel, *st, checked, self.hashes.get(rel),
                                skip["reason"] if skip else None, skip["detail"] if skip else None)


def scan_vault(vault: str | Path, default_lang: str = "auto", max_note_mb: float = 20.0,
               limits: IndexConfig | None = None, known: Record | pa.Table | None = None, racy_s: float = 2.0,
               paths: set[str] | None = None) -> VaultScan:
    """List a vault's notes and read those not `known`: the stat fast path of `fanout index`.

    `known` (fanout/store/file_states.py's Record, or its FILE_STATES rows): a note whose size, mtime_ns, inode
    and ctime_ns are the recorded ones is not read; its recorded hash (or skip reason) stands. A record taken
    within `racy_s` of the file's mtime or ctime is not trusted (a write in the clock tick of the read keeps the
    stat: git's "racy" case): the file is read again. None reads every note (a full check). Else as scan_notes.

    `paths` (vault-relative, NFC, with `known`; a watch round's events): only those paths (a note, or a folder
    and all under it) and the record's racy entries are listed and stat'ed; every other note keeps its record
    as it is; the scan takes the record's dicts over (O(paths), not O(notes)). The scan is `partial`: `skipped`
    and `ignored` name only what it listed, plus the record's skipped notes; `touched`: the paths whose state
    may differ from the record, `before`: their recorded hashes. Without a record it is a whole scan.
    """
    max_bytes = int(max_note_mb * 1e6)
    racy = int(racy_s * 1e9)
    if isinstance(known, pa.Table):
        cols = [known[c].to_pylist() for c in known.column_names]
        known = Record.of({r[0]: r for r in zip(*cols)})
    if paths is not None and known is not None:
        return _scan_paths(vault, paths, known, racy, max_bytes, default_lang, limits)
    old = {} if known is None else known.states
    listing = list_notes(vault, max_bytes=max_bytes)
    files = dict(_distinct_paths(listing.files, listing.skipped))  # (adds duplicate names to the skipped)
    skips = {s["path"]: s for s in listing.skipped}
    by_real = {real: listing.stats.get(rel) for rel, real in listing.files}
    stats = {rel: st for rel, real in files.items() if (st := by_real.get(real)) is not None}
    scan = VaultScan(root=str(Path(vault).expanduser().resolve()), files=files, stats=stats, skips=skips,
                     ignored=list(listing.ignored), max_bytes=max_bytes, default_lang=default_lang, limits=limits)
    _check_states(scan, old, racy)
    return scan


def _check_states(scan: VaultScan, old: dict[str, tuple], racy: int) -> None:
    """Read each listed note of `scan` whose stat is not the recorded one (`old`), or whose record is racy."""
    for rel in sorted(scan.files):
        rec = old.get(rel)
        st = scan.stats.get(rel)
        if rec is not None and st is not None and tuple(rec[1:5]) == st and \
                rec[5] - racy > max(st[1], st[3]):
            scan.states[rel] = rec
            scan.trusted += 1
            if rec[6] is not None:
                scan.hashes[rel] = rec[6]
            else:
                scan.skips[rel] = {"path": rel, "reason": rec[7], "detail": rec[8]}
            continue
        scan.read_file(rel)
    if any(p not in scan.states for p in old):  # (a state not in `old` comes from a read: changed already)
        scan.changed_states = True
    for s in scan.skips.values():
        log.debug("skipped %s: %s (%s)", s["path"], s["reason"], s["detail"])


def _under(rel: str, tops: set[str]) -> bool:
    """Whether `rel` is one of `tops` or under one of them."""
    at = rel.find("/")
    while at != -1:
        if rel[:at] in tops:
            return True
        at = rel.find("/", at + 1)
    return rel in tops


def _scan_paths(vault: str | Path, paths: set[str], rec: Record, racy: int, max_bytes: int,
                default_lang: str, limits: IndexConfig | None) -> VaultScan:
    """`scan_vault` limited to `paths` (see there): the record stands for every note outside them."""
    # the record's racy entries (read within `racy` of their own change) are checked as a whole walk would
    every = set(paths) | rec.racy(racy)
    tops = [t for t in sorted(every) if not _under(t.rpartition("/")[0], every)]  # (none under another)
    listing = list_notes(vault, max_bytes=max_bytes, only=set(tops))
    files = dict(_distinct_paths(listing.files, listing.skipped))
    by_real = {real: listing.stats.get(rel) for rel, real in listing.files}
    stats = {rel: st for rel, real in files.items() if (st := by_real.get(real)) is not None}
    states, hashes = rec.states, rec.hashes  # taken over: the notes outside `paths` stand as recorded
    folders = tuple(f"{t}/" for t in tops if t not in states and rec.has_under(t))  # (recorded folders only)
    gone = {t for t in tops if t in states} | ({p for p in states if p.startswith(folders)} if folders else set())
    old = rec.take(sorted(gone))
    before = {p: r[6] for p, r in old.items()}
    skips = {s["path"]: s for s in listing.skipped}
    skips.update({p: {"path": p, "reason": states[p][7], "detail": states[p][8]} for p in rec.skipped - gone})
    scan = VaultScan(root=str(Path(vault).expanduser().resolve()), files=files, stats=stats, states=states,
                     hashes=hashes, skips=skips, ignored=list(listing.ignored), max_bytes=max_bytes,
                     default_lang=default_lang, limits=limits, trusted=len(states), partial=True,
                     touched=gone | set(files), before=before)
    _check_states(scan, old, racy)
    return scan


def _distinct_paths(files: list[tuple[str, str]], skipped: list[dict[str, str]]) -> list[tuple[str, str]]:
    """(NFC path, real path) per file; of names that are equal once NFC, the NFC-named file wins (else the first
    in name order) and the others are skipped, naming the kept file."""
    if unicodedata.is_normalized("NFC", "\n".join(rel for rel, _ in files)):  # every name NFC (the usual case):
        return sorted(files)  # no two can be equal once NFC ("\n" never composes with its neighbours)
    by_key: dict[str, list[tuple[str, str]]] = {}
    for rel, real in files:
        by_key.setdefault(nfc(rel), []).append((rel, real))
    out = []
    for key, group in by_key.items():
        keep = next(((r, p) for r, p in group if r == key), group[0])
        out.append((key, keep[1]))
        for rel, _ in group:
            if rel != keep[0]:
                skipped.append({"path": shown(rel), "reason": "duplicate_name", "detail": (
                    f"its name differs from {shown(keep[0])!r} only by Unicode normal form (NFC/NFD), and both "
                    f"would be indexed as {key!r}; that file was indexed: rename or remove one of them")})
    return sorted(out)
