"""Stage: chunk notes by headings under a token budget.

Headings at `split_level` or higher always start a chunk (a tiny one too: results name its heading);
smaller sections under one such heading are packed together while they fit. Every chunk honours the budget
(estimated tokens, Cyrillic at 2 chars/token): a group over it is cut at the best break point before the
target (qmd's scores: code-fence end 80, blank line 20, list item 5, newline 1, decayed by distance), never
inside a code fence unless the fence alone is over budget; text with no usable line break is cut at a
sentence end, a space, or at last hard at the target. The next piece repeats `overlap` of the budget. Given
the embedder's tokenizer and context, a chunk whose prompt still does not fit is split again. Every chunk
keeps its heading path and character offsets in the file; the embedded text carries a `title > h2 > h3`
breadcrumb (trip2g).
"""

from __future__ import annotations

import bisect
import re
from typing import Any

import numpy as np
import pyarrow as pa
from fanout.pipelines.markdown import Line, Section, scan_lines, split_sections

from fanout.config import ChunkConfig
from fanout.schemas import CHUNKS

CHUNKER_VERSION = 3  # in the manifest: a change of the cutting rules rebuilds the index (vectors reused);
# 3: a fence closes only on as long a run of the same character with nothing after it (nested fences)
_LIST = re.compile(r"^[ \t]*([-*+]|\d+[.)])[ \t]")
_SENTENCE = re.compile(r"[.!?\u2026\u3002][\"')\]\u00bb]*\s+")
_SPACE = re.compile(r"\s+")
_LINE = re.compile(r"\n")


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


class Budget:
    """Token estimates of any span of one body in O(log n): prefix counts of Cyrillic letters (trip2g's
    2 chars/token) against `chars_per_token` for everything else, as `fanout.text.est_tokens` counts."""

    def __init__(self, body: str, chars_per_token: float):
        codes = np.frombuffer(body.encode("utf-32-le"), dtype=np.uint32)
        self.cyr = np.concatenate([[0], np.cumsum((codes >= 0x400) & (codes <= 0x4FF), dtype=np.int64)])
        self.cpt = chars_per_token

    def tokens(self, s: int, e: int) -> float:
        cyr = int(self.cyr[e] - self.cyr[s])
        return (e - s - cyr) / self.cpt + cyr / 2.0

    def end_for(self, s: int, limit: int, budget: float) -> int:
        """The largest end <= limit with tokens(s, end) <= budget (binary search; tokens grow with end)."""
        lo, hi = s, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.tokens(s, mid) <= budget:
                lo = mid
            else:
                hi = mid - 1
        return max(lo, s + 1) if limit > s else limit


def _fallback_cut(text: str, s: int, lo: int, target: int) -> int | None:
    """A sentence end, else a space, in text[lo:target] (latest first), for a piece with no line break."""
    seg = text[lo:target]
    for pat in (_SENTENCE, _SPACE):
        last = None
        for m in pat.finditer(seg):
            last = m
        if last is not None and lo + last.end() > s:
            return lo + last.end()
    return None


def cut_section(body: str, lines: list[Line], start: int, end: int, cfg: ChunkConfig,
                budget: Budget | None = None, starts: list[int] | None = None) -> list[tuple[int, int]]:
    """Cut body[start:end] into pieces of at most `cfg.max_tokens` estimated tokens, with overlap.

    Break points, best first: qmd's scored line breaks outside fences in the window before the target, then
    any earlier allowed line break, then (only when a fence alone is over budget) a line break inside it,
    then a sentence end, then a space, and at last a hard cut at the target. Every piece ends past its start,
    so the loop always ends.
    """
    budget = budget or Budget(body, cfg.chars_per_token)
    starts = starts if starts is not None else [ln.start for ln in lines]
    max_t = float(cfg.max_tokens)
    if budget.tokens(start, end) <= max_t:
        return [(start, end)]
    pieces: list[tuple[int, int]] = []
    s = start
    while budget.tokens(s, end) > max_t:
        target = budget.end_for(s, end, max_t)
        window = max(1, (target - s) // 4)
        first = bisect.bisect_right(starts, s)
        last = bisect.bisect_right(starts, target)
        cand = [(i, starts[i]) for i in range(first, last)]
        best, best_pos = 0.0, None
        for i, pos in cand:  # qmd: score x (1 - (dist/window)^2 x 0.7), past the first quarter of the piece
            if pos <= s + window:
                continue
            sc = _break_score(lines, i)
            if sc > 0:
                sc *= 1 - min((target - pos) / window, 1.0) ** 2 * 0.7
                if sc > best:
                    best, best_pos = sc, pos
        if best_pos is None:  # any allowed line break before the target, latest first
            best_pos = next((pos for i, pos in reversed(cand) if _break_score(lines, i) > 0), None)
        if best_pos is None:  # only fence lines here: the fence alone is over budget, cut between its lines
            best_pos = next((pos for _, pos in reversed(cand) if pos > s), None)
        if best_pos is None:
            best_pos = _fallback_cut(body, s, s + 1, target) or target
        pieces.append((s, best_pos))
        overlap = int((target - s) * cfg.overlap)
        back = None
        if overlap > 0:  # the next piece starts `overlap` earlier, at a line start outside fences
            lo = bisect.bisect_left(starts, best_pos - overlap)
            hi = bisect.bisect_left(starts, best_pos)
            back = next((starts[i] for i in range(lo, hi) if starts[i] > s and _break_score(lines, i) > 0),
                        None)
        s = back if back is not None and back > s else best_pos
    pieces.append((s, end))
    return pieces


def fit_context(text: str, s: int, e: int, count, limit: int, min_len: int = 16) -> list[tuple[int, int]]:
    """Split body span [s, e) until `count(text[a:b])` <= limit for every piece (real tokenizer counts).

    Halves at the line break, else sentence end, else space nearest the middle; a piece of under `min_len`
    characters is kept as it is (the embedder truncates what no split can fix).
    """
    if e - s <= min_len or count(text[s:e]) <= limit:
        return [(s, e)]
    mid = (s + e) // 2
    cut = None
    for pat in (_LINE, _SENTENCE, _SPACE):
        best = None
        for m in pat.finditer(text, s + 1, e - 1):
            if best is None or abs(m.end() - mid) < abs(best - mid):
                best = m.end()
        if best is not None and s < best < e:
            cut = best
            break
    cut = cut or mid
    return fit_context(text, s, cut, count, limit, min_len) + fit_context(text, cut, e, count, limit, min_len)


def chunk_note(path: str, title: str, lang: str, body: str, body_offset: int, cfg: ChunkConfig,
               count=None, context: int | None = None) -> list[dict]:
    """Chunk one note's body; offsets in the result are relative to the whole file text.

    `count(embed_text, title) -> tokens` and `context` (the embedder's n_ctx) make the guarantee hard: a
    chunk whose prompt the real tokenizer counts over `context` is split again until it fits.
    """
    lines = scan_lines(body)
    starts = [ln.start for ln in lines]
    sections = split_sections(body, lines)
    budget = Budget(body, cfg.chars_per_token)
    max_t = float(cfg.max_tokens)
    groups: list[list[Section]] = []
    for sec in sections:  # pack small sections under one forced heading while the group fits the budget
        forced = 0 < sec.level <= cfg.split_level
        if groups and not forced and budget.tokens(groups[-1][0].start, sec.end) <= max_t:
            groups[-1].append(sec)
            continue
        groups.append([sec])
    spans: list[tuple[int, int, tuple[str, ...], int]] = []
    for gi, g in enumerate(groups):
        for s, e in cut_section(body, lines, g[0].start, g[-1].end, cfg, budget, starts):
            k = bisect.bisect_right([sec.start for sec in g], s) - 1
            spans.append((s, e, g[max(k, 0)].path, gi))
    merged: list[tuple[int, int, tuple[str, ...], int]] = []
    for s, e, hp, gi in spans:  # a tiny tail of a cut group joins the group's previous piece if that fits
        if merged and merged[-1][3] == gi and budget.tokens(s, e) < cfg.min_tokens \
                and budget.tokens(merged[-1][0], e) <= max_t:
            ps, _, php, _ = merged[-1]
            merged[-1] = (ps, e, php, gi)
        else:
            merged.append((s, e, hp, gi))
    out: list[dict[str, Any]] = []
    for s0, e0, hp, _ in merged:
        heading = " > ".join(hp)
        crumb = " > ".join([title, *hp]) if cfg.breadcrumb else ""
        pieces = [(s0, e0)]
        if count is not None and context:
            def count_piece(t: str, crumb: str = crumb) -> int:
                return count(f"{crumb}\n{t}" if crumb else t, title)

            pieces = fit_context(body, s0, e0, count_piece, context)
        for s, e in pieces:
            text = body[s:e].strip("\n")
            if not text.strip() and len(pieces) > 1:
                continue
            n = len(out)
            out.append({
                "chunk_id": f"{path}#{n}", "path": path, "ordinal": n, "title": title, "heading": heading,
                "lang": lang, "start": body_offset + s, "end": body_offset + e, "text": text,
                "embed_text": f"{crumb}\n{text}" if crumb else text,
            })
    return out


# notes whose chunks are built as Python dicts at once (chunk_notes): the dicts of a whole vault took ~450 MB
# at 60,000 chunks; one batch's are a few MB, and the table's columns are the same
NOTES_A_BATCH = 1024


def chunk_notes(notes: pa.Table, cfg: ChunkConfig, count=None, context: int | None = None) -> pa.Table:
    """NOTES -> CHUNKS. With `count`/`context` every chunk's prompt fits the embedder (see chunk_note)."""
    parts = []
    cols = ["path", "title", "lang", "body", "body_offset"]
    for batch in notes.select(cols).to_batches(max_chunksize=NOTES_A_BATCH):  # rows as dicts a batch at a time
        rows: list[dict] = []
        for n in batch.to_pylist():
            body = n["body"]
            if not body.strip():  # a note with only front matter still gets one chunk: its title
                body = n["title"]
            rows.extend(chunk_note(n["path"], n["title"], n["lang"], body, n["body_offset"], cfg, count, context))
        parts.append(pa.Table.from_pylist(rows, schema=CHUNKS))
    return pa.concat_tables(parts) if parts else CHUNKS.empty_table()
