"""Readable `--explain`: the same words in the CLI's text/markdown/CSV/JSON output and in batch output columns.

A result's explanation (FormatResults' `_explain` JSON) holds every list that found the page (`lane`, variant
`kind` and `text`, page-level `rank`, raw `score`: BM25 for fts, cosine for vec, 1.0 for alias), the fused
RRF score and rank, the rerank score, and per query the `query` text, the `probe` decision (the BM25 probe's
normalised top score and its gap to the second, whether expansion was skipped, where the variants came from)
and the `filter` applied. Plain Python: the warm CLI client prints with it without loading the engine.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SOURCE_WORDS = {"agent": "variants from the caller", "cache": "variants from the expansions cache",
                "model": "variants from the local expander", "fallback": "expander failed: fallback variants",
                "probe_skip": "expansion skipped", "none": "no variants (expansion off)"}


def cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:max(1, n - 1)].rstrip() + "…"


def probe_text(probe: dict[str, Any] | None) -> str:
    """`BM25 probe: top 0.91, 0.30 ahead -> expansion skipped` (or `... -> variants from the caller`)."""
    if not probe:
        return ""
    head = f"BM25 probe: top {probe.get('top', 0):.2f}, {probe.get('gap', 0):.2f} ahead"
    src = probe.get("expansion")
    if probe.get("skip_expansion") and src != "probe_skip":
        head += " (clear winner)"
    return f"{head} -> {SOURCE_WORDS.get(src or '', src or 'no variants')}"


def lists_compact(lists: list[dict[str, Any]]) -> str:
    """The lists on one line, for a CSV cell or a table: `fts/orig "q" #1 7.41; vec/vec "..." #3 0.71`."""
    return "; ".join(f"{li['lane']}/{li['kind']} {json.dumps(cut(li.get('text') or '', 40), ensure_ascii=False)} "
                     f"#{li['rank']} {li['score']}" for li in sorted(lists, key=lambda x: (x["rank"], x["lane"])))


def list_lines(ex: dict[str, Any]) -> list[str]:
    """One line per list after a fused-rank line: `fts   orig   "how do I sync"   rank 1   score 7.41`."""
    head = f"fused rank {ex.get('fused_rank')}, rrf {ex.get('rrf')}"
    if ex.get("rerank") is not None:
        head += f", rerank {ex['rerank']:.3f}"
    rows = [head]
    for li in sorted(ex.get("lists", []), key=lambda x: (x["rank"], x["lane"])):
        text = cut((li.get("text") or "").replace("\n", " "), 60)
        rows.append(f"{li['lane']:<5} {li['kind']:<5} {json.dumps(text, ensure_ascii=False):<62} "
                    f"rank {li['rank']:<3} score {li['score']}")
    return rows


def query_line(ex: dict[str, Any] | None) -> str:
    """Per query: `query "..." | BM25 probe: ... | filter folder Plugins`."""
    if not ex:
        return ""
    parts = [f"query {json.dumps(ex.get('query') or '', ensure_ascii=False)}"]
    if ex.get("probe"):
        parts.append(probe_text(ex["probe"]))
    if ex.get("filter"):
        parts.append(f"filter {ex['filter']}")
    return " | ".join(parts)
