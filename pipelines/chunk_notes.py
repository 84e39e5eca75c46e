"""Stage: chunk notes by headings under a token budget.

Headings at `split_level` or higher always start a chunk; smaller sections under one such heading are packed
together while they fit. A section over the budget is cut at the best break point before the target (qmd's
scores: code-fence end 80, blank line 20, list item 5, newline 1, decayed by distance), never inside a code
fence, and the next piece repeats `overlap` of the budget. Every chunk keeps its heading path and its character
offsets in the file; the embedded text carries a `title > h2 > h3` breadcrumb (trip2g).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from fanout.config import ChunkConfig
from fanout.schemas import CHUNKS
from fanout.text import est_tokens

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+)")
_LIST = re.compile(r"^[ \t]*([-*+]|\d+[.)])[ \t]")


@dataclass
class Section:
    start: int  # offsets within the body
    end: int
    level: int  # 0 = text before the first heading
    path: tuple[str, ...]  # heading path, this section's heading last


@dataclass
class Line:
    start: int
    text: str
    in_fence: bool  # inside a fenced block (the fence lines themselves count as inside)
    fence_close: bool  # closes a fenced block
    fence_open: bool = False  # opens a fenced block


def scan_lines(body: str) -> list[Line]:
    lines: list[Line] = []
    pos = 0
    fence: str | None = None
    for raw in body.splitlines(keepends=True):
        s = raw.rstrip("\r\n")
        m = _FENCE.match(s)
        closing = opening = False
        if fence is None and m:
            fence = m.group(1)[0] * 3
            inside = opening = True
        elif fence is not None:
            inside = True
            if m and m.group(1).startswith(fence):
                fence, closing = None, True
        else:
            inside = False
        lines.append(Line(pos, s, inside, closing, opening))
        pos += len(raw)
    return lines


def split_sections(body: str, lines: list[Line]) -> list[Section]:
    """Cut the body at every heading outside code fences."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    cur = Section(0, len(body), 0, ())
    for ln in lines:
        if ln.in_fence or not (m := _HEADING.match(ln.text)):
            continue
        level, name = len(m.group(1)), m.group(2).strip()
        cur.end = ln.start
        if cur.end > cur.start or cur.level:
            sections.append(cur)
        stack = [(lv, n) for lv, n in stack if lv < level] + [(level, name)]
        cur = Section(ln.start, len(body), level, tuple(n for _, n in stack))
    cur.end = len(body)
    sections.append(cur)
    return [s for s in sections if body[s.start:s.end].strip()]


def _break_score(lines: list[Line], i: int) -> float:
    """Score of cutting just before line i (0 = not allowed)."""
    ln = lines[i]
    prev = lines[i - 1] if i > 0 else None
    if prev is not None and prev.fence_close:
        return 80.0
    if ln.fence_open:  # cutting just before a fence opens is fine
        return 20.0
    if ln.in_fence:
        return 0.0  # inside a fence (its closing line included)
    if prev is not None and not prev.text.strip():
        return 20.0
    if _LIST.match(ln.text):
        return 5.0
    return 1.0


def cut_section(body: str, lines: list[Line], start: int, end: int, cfg: ChunkConfig) -> list[tuple[int, int]]:
    """Cut body[start:end] into pieces under the budget, never inside a fence, with overlap."""
    text = body[start:end]
    cpt = max(1.0, len(text) / max(1, est_tokens(text, cfg.chars_per_token)))  # chars per token here
    budget = int(cfg.max_tokens * cpt)
    if len(text) <= budget:
        return [(start, end)]
    window = max(1, int(budget * 0.25))
    overlap = int(budget * cfg.overlap)
    idx = [i for i, ln in enumerate(lines) if start < ln.start < end]
    pieces: list[tuple[int, int]] = []
    s = start
    while end - s > budget:
        target = s + budget
        best, best_pos = 0.0, None
        for i in idx:
            pos = lines[i].start
            if pos <= s + budget // 4 or pos > target:
                continue
            sc = _break_score(lines, i)
            if sc <= 0:
                continue
            dist = (target - pos) / window
            sc *= 1 - min(dist, 1.0) ** 2 * 0.7
            if sc > best:
                best, best_pos = sc, pos
        if best_pos is None:  # no allowed break before the target (a long fence): take the next allowed one
            nxt = [lines[i].start for i in idx if lines[i].start > target and _break_score(lines, i) > 0]
            if not nxt:
                break
            best_pos = nxt[0]
        pieces.append((s, best_pos))
        # the next piece starts `overlap` chars earlier, at a line start outside fences
        back = [lines[i].start for i in idx
                if best_pos - overlap <= lines[i].start < best_pos and _break_score(lines, i) > 0
                and lines[i].start > s]
        s = back[0] if back and overlap > 0 else best_pos
    pieces.append((s, end))
    return pieces


def chunk_note(path: str, title: str, lang: str, body: str, body_offset: int, cfg: ChunkConfig) -> list[dict]:
    """Chunk one note's body; offsets in the result are relative to the whole file text."""
    lines = scan_lines(body)
    sections = split_sections(body, lines)
    groups: list[list[Section]] = []
    for sec in sections:  # pack small sections under one forced heading
        forced = 0 < sec.level <= cfg.split_level
        if groups and not forced:
            g = groups[-1]
            size = est_tokens(body[g[0].start:sec.end], cfg.chars_per_token)
            if size <= cfg.max_tokens:
                g.append(sec)
                continue
        groups.append([sec])
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    for g in groups:
        for s, e in cut_section(body, lines, g[0].start, g[-1].end, cfg):
            path_at = next((sec.path for sec in reversed(g) if sec.start <= s), g[0].path)
            spans.append((s, e, path_at))
    merged: list[tuple[int, int, tuple[str, ...]]] = []
    for s, e, hp in spans:  # a tiny trailing piece joins the previous chunk of the same section
        if merged and est_tokens(body[s:e], cfg.chars_per_token) < cfg.min_tokens and merged[-1][1] >= s \
                and hp[:1] == merged[-1][2][:1]:
            ps, _, php = merged[-1]
            merged[-1] = (ps, e, php)
        else:
            merged.append((s, e, hp))
    out = []
    for n, (s, e, hp) in enumerate(merged):
        text = body[s:e].strip("\n")
        heading = " > ".join(hp)
        crumb = " > ".join([title, *hp]) if cfg.breadcrumb else ""
        out.append({
            "chunk_id": f"{path}#{n}", "path": path, "ordinal": n, "title": title, "heading": heading,
            "lang": lang, "start": body_offset + s, "end": body_offset + e, "text": text,
            "embed_text": f"{crumb}\n{text}" if crumb else text,
        })
    return out


def chunk_notes(notes: pa.Table, cfg: ChunkConfig) -> pa.Table:
    """NOTES -> CHUNKS."""
    rows: list[dict] = []
    for n in notes.to_pylist():
        body = n["body"]
        if not body.strip():  # a note with only front matter still gets one chunk: its title
            body = n["title"]
        rows.extend(chunk_note(n["path"], n["title"], n["lang"], body, n["body_offset"], cfg))
    return pa.Table.from_pylist(rows, schema=CHUNKS)
