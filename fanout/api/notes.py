"""Reading notes out of an indexed vault, confined to it: the one place the CLI (`get`, `multi-get`,
`--full`) and the MCP `get` tool resolve a note.

A reference is a path relative to the vault (".md" may be left off), a note's title, one of its aliases, or
any of these with `#Heading` (a section, with its subsections) and/or `:LINE` / `:FROM-TO` (file line
numbers, as an editor shows them). Nothing outside the vault is ever read: absolute paths, `~`, drive letters,
`..` that climbs out and symlinks that point out are refused with a message saying what to give instead.
"""

from __future__ import annotations

import fnmatch
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from fanout.config.sections import IndexConfig
from fanout.errors import NoteError

if TYPE_CHECKING:
    from fanout.store.db import Collection

_LINES = re.compile(r":(\d+)(?:-(\d+))?$")



def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).lstrip("#").split()).casefold()


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def find_file(vault: Path | None, rel: object, label: str = "`path`") -> Path | None:
    """`rel` -> the note file inside `vault`, or None when there is no such file; raises NoteError for a
    reference that is malformed or leads outside the vault."""
    if rel is not None and not isinstance(rel, str):
        raise NoteError(f"{label} must be a string, got {type(rel).__name__} {str(rel)[:40]}; give a note's "
                        "path relative to the vault, as search returns it")
    if rel is None or not rel.strip():
        raise NoteError(f"{label} is missing; give a note's path relative to the vault, as search returns it")
    if "\x00" in rel or len(rel) > 1024:
        raise NoteError(f"{label} has a NUL byte or over 1024 characters; give a note's path as search "
                        "returns it")
    posix = rel.strip().replace("\\", "/")
    if PurePosixPath(posix).is_absolute() or posix.startswith("~") or re.match(r"^[A-Za-z]:", posix):
        raise NoteError(f"{label} must be relative to the vault, got the absolute path {rel!r}; give "
                        "it as search returns it, e.g. \"Folder/Note.md\"")
    if vault is None or not vault.is_dir():
        raise NoteError(f"the index does not name an existing vault ({vault}); re-run `fanout index` on the "
                        "vault")
    vault = vault.resolve()
    tries = [posix] + ([] if posix.lower().endswith(".md") else [posix + ".md"])
    tries += [unicodedata.normalize("NFD", p) for p in tries]
    for n, cand in enumerate(tries):
        target = (vault / cand).resolve()
        if not target.is_relative_to(vault):
            if n == 0:
                raise NoteError(f"{label} {rel!r} leads outside the vault; only notes inside it can be "
                                "read: give the path as search returns it")
            continue
        if target.is_file():
            if target.suffix.lower() != ".md":
                raise NoteError(f"{label} {rel!r} is not a note (.md file); only notes can be read")
            return target
    return None


def resolve_path(vault: Path | None, rel: object, known: Callable[[], list[str]], label: str = "`path`") -> Path:
    """Like find_file, but a missing note raises NoteError with the closest indexed paths."""
    target = find_file(vault, rel, label)
    if target is not None:
        return target
    assert isinstance(rel, str)  # find_file refuses anything else
    close = get_close_matches(nfc(rel.strip().replace("\\", "/")), known(), n=3)
    raise NoteError(f"{label}: no note {rel!r} in the vault" +
                    (f"; did you mean {close}?" if close else "; use a path from search results"))


@dataclass
class Ref:
    """A parsed reference: `name` (path, title or alias), `heading`, first and last file line; `problem`: why
    this reading cannot be served (a line range that counts from 0 or runs backwards), else None."""

    name: str
    heading: str | None = None
    line_from: int | None = None
    line_to: int | None = None
    problem: str | None = None


MAX_REF_SPLITS = 8  # `#` positions tried as the name/heading split of one reference (a name holds a few at most)


def parse_ref(ref: str) -> Ref:
    """`Folder/Note.md#Setup > Sync:40-60` -> Ref("Folder/Note.md", "Setup > Sync", 40, 60): the likeliest of
    `ref_readings` (a malformed line range raises NoteError)."""
    r = ref_readings(ref)[0]
    if r.problem:
        raise NoteError(r.problem)
    return r


def _splits(text: str) -> list[tuple[str, str | None]]:
    """(name, heading) readings of `text`, likeliest first: split after a `.md` that a `#` follows (a path
    from search results: `C# Tips.md#Intro`), the whole text when it ends in `.md` (`C# Tips.md`), then at
    each `#` from the first, then the whole text (a title holding `#`)."""
    at = [i for i, ch in enumerate(text) if ch == "#"][:MAX_REF_SPLITS]
    order: list[int | None] = [i for i in at if text[:i].rstrip().lower().endswith(".md")]
    if text.rstrip().lower().endswith(".md"):
        order.append(None)
    order += [*at, None]
    out: list[tuple[str, str | None]] = []
    for i in dict.fromkeys(order):
        got = (text.strip(), None) if i is None else (text[:i].strip(), text[i + 1:].strip() or None)
        if got[0] and got not in out:
            out.append(got)
    return out or [(text.strip(), None)]


def ref_readings(ref: str) -> list[Ref]:
    """Every way to read `ref`, likeliest first. A `#` may be part of a file name or heading (`C# Tips.md`),
    and `:NN` the end of a heading (`Time 10:30`) rather than file lines: `read_ref` serves the first reading
    whose note (and heading) exist. With a heading, the literal heading comes before a lines suffix (a ref
    search wrote reads back); without one, `Note:40` is line 40 before it is a title ending in `:40`."""
    literal = [Ref(n, h) for n, h in _splits(ref)]
    m = _LINES.search(ref)
    if not m:
        return literal
    a, b = int(m[1]), int(m[2]) if m[2] else None
    problem = None
    if a < 1 or (b is not None and b < a):
        problem = f"line range {m[0]!r} in {ref!r}: lines count from 1 and FROM-TO needs TO >= FROM"
    lines = [Ref(n, h, a, b, problem) for n, h in _splits(ref[:m.start()])]
    first = [literal[0], lines[0]] if lines[0].heading is not None else [lines[0], literal[0]]
    out: list[Ref] = []
    for r in first + lines[1:] + literal[1:]:
        if r not in out:
            out.append(r)
    return out


def read_ref(ref: str, locate_note: Callable[[str], Path], read: Callable[[Path], dict[str, Any]]
             ) -> tuple[dict[str, Any], Ref]:
    """(the note, the reading of `ref` that names it): the first of `ref_readings` whose note `locate_note`
    finds and whose heading, if any, the note has; else the likeliest reading's NoteError."""
    first: NoteError | None = None
    notes: dict[Path, dict[str, Any]] = {}
    for r in ref_readings(ref):
        try:
            if r.problem:
                raise NoteError(r.problem)
            target = locate_note(r.name)
            if target not in notes:
                notes[target] = read(target)
            if r.heading is not None:
                find_section(notes[target], r.heading)
            return notes[target], r
        except NoteError as e:
            first = first or e
    assert first is not None
    raise first


def match_title(docs: list[dict], name: str) -> list[str]:
    """Indexed paths whose title or file name equals `name` (any case); failing that, whose alias (or an
    alias's last path segment) does."""
    want = _norm(name.removesuffix(".md"))
    by_title = [d["path"] for d in docs
                if want in (_norm(d.get("title") or ""), _norm(d["path"].rsplit("/", 1)[-1].removesuffix(".md")))]
    if by_title:
        return by_title
    return [d["path"] for d in docs
            if any(_norm(k) == want for a in d.get("aliases") or [] for k in (a, a.rsplit("/", 1)[-1]) if k)]


def locate(vault: Path | None, name: str, docs: Callable[[], list[dict]], label: str = "note") -> Path:
    """A path, title or alias -> the note file (inside the vault)."""
    target = find_file(vault, name, label)
    if target is not None:
        return target
    rows = docs()
    paths = match_title(rows, name)
    if len(paths) > 1:
        raise NoteError(f"{label} {name!r} is the title or alias of {len(paths)} notes: {paths[:10]}; give the "
                        "path instead")
    if paths and (target := find_file(vault, paths[0], label)) is not None:
        return target
    return resolve_path(vault, name, lambda: [d["path"] for d in rows], label)


@dataclass
class Section:
    path: list[str]
    level: int
    start: int  # character offset in the body
    end: int


def sections(body: str) -> list[Section]:
    """The headed sections of a note body (code fences respected), each up to the next heading of its level."""
    from fanout.pipelines.markdown import scan_lines, split_sections

    secs = [s for s in split_sections(body, scan_lines(body)) if s.level]
    out = []
    for i, s in enumerate(secs):
        end = next((t.start for t in secs[i + 1:] if t.level <= s.level), len(body))
        out.append(Section(list(s.path), s.level, s.start, end))
    return out


def read_note(vault: Path | None, target: Path, label: str = "`path`", limits: IndexConfig | None = None
              ) -> dict[str, Any]:
    """A note file -> {path, title, lang, body, body_line (file line of the body's first char), text}.

    `limits` (the index config; default: its defaults) gives the size limit (`index.max_note_mb`, the
    limit the index applies) and the front matter bounds.
    """
    from fanout.io.vault import read_regular
    from fanout.pipelines.scan_notes import parse_note

    if vault is None:  # callers found `target` through find_file, which refuses a missing vault first
        raise NoteError("the index does not name an existing vault (None); re-run `fanout index` on the vault")
    limits = limits or IndexConfig()
    rel = nfc(target.relative_to(vault.resolve()).as_posix())
    try:  # regular files only (never blocks on a FIFO), never a link swapped in after resolving
        raw, mtime = read_regular(target, int(limits.max_note_mb * 1e6), str(vault.resolve()))
        note = parse_note(rel, raw, mtime, limits=limits)
    except (OSError, ValueError) as e:
        raise NoteError(f"{label}: note {rel!r} cannot be read: {e.args[-1]}") from None
    text = raw.decode("utf-8").lstrip("\ufeff")
    note["file_text"] = text
    note["body_line"] = text[:note["body_offset"]].count("\n") + 1
    return note


def find_section(note: dict[str, Any], heading: str, label: str = "`heading`") -> tuple[str, int, int]:
    """A heading ("Setup > Sync", or its last part; any case) -> (full heading path, start, end) in the body."""
    if not isinstance(heading, str) or not heading.strip():
        raise NoteError(f"{label} must be a non-empty string, as search returns it")
    secs = sections(note["body"])
    headings = [" > ".join(s.path) for s in secs]
    want = [_norm(h) for h in heading.split(">")]
    hit = next((i for i, s in enumerate(secs) if [_norm(h) for h in s.path][-len(want):] == want), None)
    if hit is None:
        raise NoteError(f"{label}: no heading {heading!r} in {note['path']!r}; headings: {headings[:30]}")
    return headings[hit], secs[hit].start, secs[hit].end


def headings_of(note: dict[str, Any]) -> list[str]:
    return [" > ".join(s.path) for s in sections(note["body"])]


def note_lines(note: dict[str, Any], heading: str | None = None, line_from: int | None = None,
               line_to: int | None = None, max_lines: int | None = None) -> tuple[str | None, int, list[str]]:
    """The lines to show: (heading path or None, first file line number, lines).

    Without a heading or lines: the body (front matter left out). `heading`: that section. `line_from`:
    from that file line (to `line_to`, or the end of the section/file). `max_lines` caps the count.
    """
    body, first = note["body"], note["body_line"]
    start, end, head = 0, len(body), None
    if heading is not None:
        head, start, end = find_section(note, heading)
    first += body[:start].count("\n")
    lines = body[start:end].rstrip("\n").split("\n")
    if line_from is not None:
        if heading is None:  # whole file, front matter included, when lines are asked for
            lines, first = note["file_text"].rstrip("\n").split("\n"), 1
        last = first + len(lines) - 1
        if heading is None and line_from > last:
            raise NoteError(f"line {line_from} is past the end of {note['path']!r} (lines {first}-{last})")
        lo, hi = max(line_from, first), last if line_to is None else min(line_to, last)
        if lo > hi:  # a section's lines and the range do not meet
            asked = f"{line_from}-{line_to}" if line_to is not None else f"{line_from}"
            raise NoteError(f"lines {asked} are outside section {head!r} of {note['path']!r} (lines {first}-{last}); "
                            "give lines inside it, or leave the heading out")
        lines, first = lines[lo - first:hi - first + 1], lo
    if heading is None and line_from is None:  # the body as MCP `get` returns it: no blank edges
        while lines and not lines[0].strip():
            lines, first = lines[1:], first + 1
    if max_lines is not None:
        lines = lines[:max_lines]
    return head, first, lines


def render_lines(first: int, lines: list[str], numbers: bool) -> str:
    if not numbers:
        return "\n".join(lines)
    width = len(str(first + len(lines)))
    return "\n".join(f"{first + i:>{width}}  {ln}" for i, ln in enumerate(lines))


def match_many(pattern: str, paths: list[str]) -> list[str]:
    """`multi-get`'s selection: a glob over the indexed paths ("Plugins/*.md", "**/Sync*"), or a comma list
    of references (kept as given, resolved one by one). Indexed paths are NFC, so the pattern is too."""
    pattern = nfc(pattern)
    if any(ch in pattern for ch in "*?["):
        globs = [p.strip() for p in pattern.split(",") if p.strip()]
        return sorted(p for p in paths if any(fnmatch.fnmatchcase(p, g) or fnmatch.fnmatchcase(p, g + ".md")
                                              for g in globs))
    return [p.strip() for p in pattern.split(",") if p.strip()]


def line_of(note: dict[str, Any], snippet: str, heading: str | None = None) -> int | None:
    """The file line where a snippet (lines joined by single spaces) starts; searched from the section on."""
    snip = " ".join(snippet.split())
    if not snip:
        return None
    start = 0
    if heading:
        try:
            _, start, _ = find_section(note, heading)
        except NoteError:
            start = 0
    offset = 0
    for i, ln in enumerate(note["body"].split("\n")):
        norm = " ".join(ln.split())
        if offset + len(ln) >= start and norm and (snip.startswith(norm) or norm.startswith(snip[:80])):
            return note["body_line"] + i
        offset += len(ln) + 1
    return None


def vault_of(col: Collection) -> Path | None:
    """The vault a collection was indexed from, as its manifest records it (None: not recorded)."""
    v = col.read_manifest().get("vault")
    return Path(v).resolve() if v else None


def indexed_docs(col: Collection) -> Callable[[], list[dict]]:
    """A loader of the collection's documents (path, title, aliases), read once on first call: what `locate`
    matches titles and aliases against."""
    rows: list[dict] = []

    def load() -> list[dict]:
        if not rows:
            rows.extend(col.read(col.documents_name, ["path", "title", "aliases"]).to_pylist())
        return rows
    return load


def get_note(col: Collection, ref: str, max_lines: int | None) -> dict[str, Any]:
    """`KnowledgeBase.get`'s note (the fields of a `Note`): `ref` resolved among the indexed notes of `col` and read
    from its vault (never outside it), cut to its section or lines and to `max_lines`."""
    vault = vault_of(col)
    docs = indexed_docs(col)
    note, r = read_ref(ref, lambda name: locate(vault, name, docs),
                       lambda target: read_note(vault, target, "note", col.cfg.index if col.cfg else None))
    head, first, lines = note_lines(note, r.heading, r.line_from, r.line_to, max_lines)
    return {"path": note["path"], "title": note["title"], "heading": head, "first_line": first,
            "text": "\n".join(lines), "lang": note.get("lang")}
