"""`fanout eval --sections N`: the section metric of issue 43 on the benchmark's deep-section queries.

Judgments: bench/data/deep_sections.jsonl (one line per query: `id`, `path` the relevant page, `heading` the
heading path of the section that answers it, `accept` other sections that answer it too, `how` the judgment was
made), written by reading each page, before any sections run was looked at.

A returned section counts for a query when it belongs to the judged page and its cited lines (line_from to
line_to) hold the judged section's heading line: the chunker packs small subsections under the heading of the
first one ("Settings" holds "Settings > Flatten outlines"), so a section may cite the answer under its
parent's name; a section that holds the heading holds the start of the answer. `hit@k`: one of the page's
first k sections counts (k <= N; the first k of an N run are what `--sections k` returns, the order being the
same). Page ranking is checked in the same run: every query is searched with and without sections, and the
page lists must be identical.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fanout.errors import InputMissing, UserError

JUDGMENTS = Path(__file__).resolve().parents[2] / "bench" / "data" / "deep_sections.jsonl"


def load_judgments(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """id -> judgment (path, heading, accept, how)."""
    p = Path(path) if path else JUDGMENTS
    if not p.is_file():
        raise InputMissing(f"--section-judgments: no file {p}; give the deep-section judgments JSONL "
                           "(bench/data/deep_sections.jsonl in a source checkout)")
    out = {}
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            j = json.loads(line)
            for key in ("id", "path", "heading"):
                if not isinstance(j.get(key), str) or not j[key]:
                    raise UserError(f"{p}:{n}: `{key}` must be a non-empty string")
            out[j["id"]] = j
    return out


def heading_lines(vault: Path, judgment: dict[str, Any]) -> list[int]:
    """The file line of each accepted section's heading (the judged one and its alternatives)."""
    from fanout.api.notes import find_file, find_section, read_note

    target = find_file(vault, judgment["path"], "judged path")
    if target is None:
        raise UserError(f"judged page {judgment['path']!r} is not in {vault}")
    note = read_note(vault, target)
    lines = []
    for head in [judgment["heading"], *judgment.get("accept", [])]:
        _, start, _ = find_section(note, head)
        lines.append(note["body_line"] + note["body"][:start].count("\n"))
    return lines


def score_sections(results: list[dict], qs: list[dict], judgments: dict[str, dict], vault: Path, n: int,
                   mode: str) -> list[dict]:
    """Per judged query of `qs`: the judged page's rank (None: not returned) and hit@k for k = 1..n."""
    by_q: dict[str, list[dict]] = {}
    for r in results:
        by_q.setdefault(r["qid"], []).append(r)
    rows = []
    for q in qs:
        j = judgments.get(q["id"])
        if j is None:
            continue
        want = heading_lines(vault, j)
        page = next((r for r in by_q.get(q["id"], []) if r["path"] == j["path"]), None)
        secs = (page or {}).get("sections") or []
        first = next((i for i, s in enumerate(secs, 1) if s["line_from"] is not None
                      and any(s["line_from"] <= w <= s["line_to"] for w in want)), None)
        rows.append({"mode": mode, "id": q["id"], "lang": q["lang"], "page_rank": page["rank"] if page else None,
                     "section_rank": first, **{f"hit_{k}": first is not None and first <= k for k in range(1, n + 1)},
                     "cited": [s["ref"] for s in secs]})
    return rows


def same_pages(plain: list[dict], with_sections: list[dict]) -> int:
    """How many result rows differ (page, rank, score, heading, snippet) between the two runs; 0 = identical."""
    keys = ("qid", "rank", "path", "title", "heading", "snippet", "score")
    a = [tuple(r[k] for k in keys) for r in plain]
    b = [tuple(r[k] for k in keys) for r in with_sections]
    return sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))


def report(rows: list[dict], n: int, diffs: dict[str, int]) -> str:
    """The markdown section of report.md."""
    out = [f"## sections (deep-section queries, {JUDGMENTS.name})", "",
           "| mode | lang | queries | page returned | " + " | ".join(f"section@{k}" for k in sorted({1, n}))
           + " | page rows changed by --sections |", "|---|---|---|---|" + "---|" * len({1, n}) + "---|"]
    for mode in dict.fromkeys(r["mode"] for r in rows):
        for lang in ("en", "ru", "all"):
            sub = [r for r in rows if r["mode"] == mode and (lang == "all" or r["lang"] == lang)]
            if not sub:
                continue
            cells = [f"{sum(r[f'hit_{k}'] for r in sub)}/{len(sub)}" for k in sorted({1, n})]
            out.append(f"| {mode} | {lang} | {len(sub)} | {sum(r['page_rank'] is not None for r in sub)} | "
                       + " | ".join(cells) + f" | {diffs.get(mode, 0)} |")
    return "\n".join(out) + "\n"
