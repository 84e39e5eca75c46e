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
from fanout.text import detect_lang, nfc

log = logging.getLogger(__name__)

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?\r?\n)?---[ \t]*(\r?\n|\Z)", re.DOTALL)
_H1 = re.compile(r"^# +(.+?)\s*#*\s*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~)")


def list_markdown(vault: Path) -> list[Path]:
    """All `*.md` notes under `vault` that would be read (inside the vault, regular files), in path order."""
    return [Path(vault) / rel for rel, _ in list_notes(vault).files]


def _as_list(value: Any) -> list[str]:
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


def note_lang(value: Any, fallback: str, rel: str) -> str:
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
    """Scan a vault. Returns (notes: NOTES, skipped: SKIPPED); raises VaultError for an unusable vault path.

    Paths are NFC (what macOS writes as NFD is indexed, searched and filtered in one form); a file whose
    name differs from another's only by normal form is skipped (`duplicate_name`), keeping the one whose name
    is already NFC. Skipped files are logged at DEBUG only: the caller reports them (`fanout index` prints
    each once). `limits` (the index config) bounds front matter and fields (parse_note).
    """
    max_bytes = int(max_note_mb * 1e6)
    listing = list_notes(vault, max_bytes=max_bytes)
    root = str(Path(vault).expanduser().resolve())
    rows: list[dict[str, Any]] = []
    skipped = list(listing.skipped)
    files = _distinct_paths(listing.files, skipped)
    for rel, real in files:
        try:
            raw, mtime = read_regular(real, max_bytes, root)
            rows.append(parse_note(rel, raw, mtime, default_lang, limits))
        except (NotARegularFile, OutsideVault, TooLarge) as e:
            reason = {NotARegularFile: "not_regular_file", OutsideVault: "outside_vault", TooLarge: "too_large"}
            skipped.append({"path": rel, "reason": reason[type(e)], "detail": str(e)})
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                skipped.append({"path": rel, "reason": "path_too_long", "detail": too_long(real)})
            else:
                skipped.append({"path": rel, "reason": "unreadable", "detail": e.strerror or str(e)})
        except ValueError as e:
            reason, detail = e.args if len(e.args) == 2 else ("bad_file", str(e))
            skipped.append({"path": rel, "reason": reason, "detail": detail})
        except RecursionError:  # the depth limit should prevent it; one note never stops the scan
            skipped.append({"path": rel, "reason": "bad_yaml", "detail": "front matter is nested too deeply to "
                            "read; simplify it (or lower index.front_matter_max_depth)"})
        except MemoryError:
            skipped.append({"path": rel, "reason": "too_large", "detail": "reading it ran out of memory; "
                            "split the note or simplify its front matter"})
        except Exception as e:  # anything else one note's text raises: skip it, keep the rest
            log.debug("parsing %s failed", rel, exc_info=True)
            skipped.append({"path": rel, "reason": "bad_file", "detail": f"cannot be parsed "
                            f"({type(e).__name__}: {str(e)[:200]}); check its front matter"})
    for s in skipped:
        log.debug("skipped %s: %s (%s)", s["path"], s["reason"], s["detail"])
    skipped += [{"path": p, "reason": IGNORED, "detail": "matches an ignore rule"} for p in listing.ignored]
    return pa.Table.from_pylist(rows, schema=NOTES), pa.Table.from_pylist(skipped, schema=SKIPPED)


def _distinct_paths(files: list[tuple[str, str]], skipped: list[dict[str, str]]) -> list[tuple[str, str]]:
    """(NFC path, real path) per file; of names that are equal once NFC, the NFC-named file wins (else the first
    in name order) and the others are skipped, naming the kept file."""
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
