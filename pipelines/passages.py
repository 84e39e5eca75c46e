"""Passages and snippets of a chunk for a query: shared by Retrieve (snippets, rerank passages), the
grounded expansion prompt and RerankCandidates. Pure functions over strings.

A chunk's lines, their token estimates and their term stems are computed once per chunk text (an LRU
memo): a batch shows the same chunks to many queries, and the per-line regexes were ~20% of a query's CPU.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

from fanout.text import est_tokens, stem_key, terms

_WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)  # fanout.text's word pattern, with positions


_MD_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]")


def query_keys(*texts: str | None) -> set[str]:
    """Crude stems of the terms of the query and of its keyword variants (an agent's short_query)."""
    return {stem_key(t) for text in texts if text for t in terms(text)}


def _focus(text: str, keys: set[str], limit: int) -> str:
    """At most `limit` characters of `text`, starting a little before its first query term when the term
    would fall outside the first `limit` characters (cut at word boundaries)."""
    if len(text) <= limit:
        return text
    start = 0
    for m in _WORD_RE.finditer(text):
        if stem_key(m.group(0).casefold()) in keys:
            if m.end() > limit:
                start = max(0, m.start() - limit // 4)
                while start > 0 and not text[start - 1].isspace():
                    start -= 1
            break
    return text[start:start + limit]


def best_passage(text: str, query: str, max_tokens: int, keys: set[str] | None = None) -> str:
    """The run of lines of `text` (about max_tokens long) holding the most distinct query terms, then the most
    hits (`keys`: the stems of query_keys(query, short_query), default the query's own).

    Heading lines are never a passage by themselves: they are left out whenever the text has other lines
    (the result shows its heading path separately), so a section whose first line is long gives that line,
    not its `## Heading`. With no term anywhere the first lines are taken; an over-long passage is cut by
    characters around its first query term.
    """
    split = _split_lines(text)
    if split is None:
        return text.strip()
    lines, toks, stems = split
    qk = query_keys(query) if keys is None else keys
    found = [[k for k in st if k in qk] for st in stems]
    best, best_i, best_j = (-1, -1), 0, 1
    # each start i's window is lines i..j-1, as many as fit max_tokens (at least line i); j never moves back
    # as i moves on, so one pass adds each line once and drops it once (a count per term: its distinct ones)
    n, size, j, hits = len(lines), 0, 0, 0
    count: Counter[str] = Counter()
    for i in range(n):
        if i:
            size -= toks[i - 1]
            hits -= len(found[i - 1])
            count.subtract(found[i - 1])
        while j < n and (j == i or size + toks[j] <= max_tokens):
            size += toks[j]
            hits += len(found[j])
            count.update(found[j])
            j += 1
        seen = sum(1 for c in count.values() if c > 0) if hits else 0
        if (seen, hits) > best:  # the most distinct terms first (query and short_query alike), then hits
            best, best_i, best_j = (seen, hits), i, j
    passage = "\n".join(lines[best_i:best_j])
    return _focus(passage, qk, max_tokens * 6)  # a single over-long line: cut by characters


@functools.lru_cache(maxsize=4096)
def _split_lines(text: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[tuple[str, ...], ...]] | None:
    """A chunk's non-blank lines (headings left out when it has others), each line's token estimate and the
    stems of its terms; None for a blank text. Memoised per text (chunk texts repeat across queries)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    body = [ln for ln in lines if not _MD_HEADING.match(ln)]
    lines = body or lines
    # t[:5] is stem_key(t), inlined: a call per word was a tenth of a snippet's CPU at 60,000 chunks
    return (tuple(lines), tuple(est_tokens(ln) for ln in lines),
            tuple(tuple(t[:5] for t in terms(ln)) for ln in lines))


def snippet(text: str, keys: set[str], max_tokens: int, chars: int) -> str:
    """A result's snippet: the best passage on one line, at most `chars` characters around its terms."""
    return _focus(" ".join(best_passage(text, "", max_tokens, keys).split()), keys, chars)
