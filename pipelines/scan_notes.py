"""Stage: scan a vault for markdown notes and parse their front matter.

The vault is a boundary (fanout/vault.py): symlinks are followed only inside it, only regular files are
opened (never blocking), link loops end, names that are not UTF-8 are skipped. Bad files (non-UTF-8 text,
binary, empty, unreadable, too large, broken YAML, outside the vault, FIFO/device) are reported with path and
reason and skipped; ignored paths (`.fanoutignore`, Obsidian's excluded files) come back with reason
`ignored`; everything else is returned.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from fanout.filters import inline_tags, prop_values
from fanout.schemas import NOTES, SKIPPED
from fanout.text import detect_lang, nfc
from fanout.vault import NotARegularFile, OutsideVault, TooLarge, list_notes, read_regular

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


def parse_note(rel: str, raw: bytes, mtime: float, default_lang: str = "auto") -> dict[str, Any]:
    """Parse one note's bytes into a NOTES row; raises ValueError(reason, detail) for a bad file."""
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
        try:
            loaded = yaml.safe_load(m.group(1) or "") or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark else ""
            raise ValueError("bad_yaml", f"front matter does not parse{where}: {getattr(e, 'problem', e)}") from None
        if not isinstance(loaded, dict):
            raise ValueError("bad_yaml", f"front matter is a {type(loaded).__name__}, not a mapping")
        meta = loaded
        body_offset = m.end()
    body = text[body_offset:]
    name = rel.rsplit("/", 1)[-1][:-3]
    title = _first_h1(body) or name
    lang = default_lang if default_lang != "auto" else detect_lang(body or title)
    return {
        "path": rel,
        "title": title,
        "aliases": _as_list(meta.get("aliases", meta.get("alias"))),
        "tags": [t.lstrip("#") for t in _as_list(meta.get("tags", meta.get("tag")))],
        "description": str(meta.get("description") or ""),
        "lang": str(meta.get("lang") or lang),
        "body": body,
        "body_offset": body_offset,
        "content_hash": hashlib.sha256(raw).hexdigest(),
        "mtime": mtime,
        "props": prop_values(meta),
        "inline_tags": inline_tags(body),
    }


IGNORED = "ignored"  # SKIPPED reason of paths excluded by ignore rules (not a problem: no exit 3)


def scan_notes(vault: str | Path, default_lang: str = "auto", max_note_mb: float = 20.0) -> tuple[pa.Table, pa.Table]:
    """Scan a vault. Returns (notes: NOTES, skipped: SKIPPED); raises VaultError for an unusable vault path."""
    max_bytes = int(max_note_mb * 1e6)
    listing = list_notes(vault, max_bytes=max_bytes)
    root = str(Path(vault).expanduser().resolve())
    rows: list[dict[str, Any]] = []
    skipped = list(listing.skipped)
    for rel, real in listing.files:
        rel = nfc(rel)
        try:
            raw, mtime = read_regular(real, max_bytes, root)
            rows.append(parse_note(rel, raw, mtime, default_lang))
        except (NotARegularFile, OutsideVault, TooLarge) as e:
            reason = {NotARegularFile: "not_regular_file", OutsideVault: "outside_vault", TooLarge: "too_large"}
            skipped.append({"path": rel, "reason": reason[type(e)], "detail": str(e)})
        except OSError as e:
            skipped.append({"path": rel, "reason": "unreadable", "detail": e.strerror or str(e)})
        except ValueError as e:
            reason, detail = e.args if len(e.args) == 2 else ("bad_file", str(e))
            skipped.append({"path": rel, "reason": reason, "detail": detail})
    for s in skipped:
        log.warning("skipped %s: %s (%s)", s["path"], s["reason"], s["detail"])
    skipped += [{"path": p, "reason": IGNORED, "detail": "matches an ignore rule"} for p in listing.ignored]
    return pa.Table.from_pylist(rows, schema=NOTES), pa.Table.from_pylist(skipped, schema=SKIPPED)
