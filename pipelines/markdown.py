"""Markdown line scanning shared by chunking (chunk_notes) and `fanout get`
(fanout/api/notes.py): lines with their code-fence state, and the heading sections of a note body."""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")  # an ATX heading: level marks, text
FENCE = re.compile(r"^[ \t]{0,3}(```+|~~~+)")


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
        m = FENCE.match(s)
        closing = opening = False
        if fence is None and m:
            fence = m.group(1)
            inside = opening = True
        elif fence is not None:
            inside = True
            # CommonMark: a fence closes on the same character at least as many times, with nothing after it;
            # a ```` block may hold ``` blocks (and `# lines` in them) without ending
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not s[m.end():].strip():
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
        if ln.in_fence or not (m := HEADING.match(ln.text)):
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
