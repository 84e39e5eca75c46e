"""Printing search responses (the dicts fanout/api/service.py returns): text, JSON, CSV, markdown, paths only.

Plain Python (no pyarrow): the warm-path client prints a server's answer without loading the engine.
`--explain` is readable in every format (fanout/explain.py): the query text and the probe decision, and for
each page every list that found it, as lane, variant kind and text, rank and score.

Note text is not trusted (fanout/safe_text.py): text and `--files` output show control characters as \\xNN,
`--null` ends each exact path with NUL, CSV cells that a spreadsheet would run as a formula start
with `'`, markdown cells are literal text (no HTML, link or image); JSON is exact.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing itself costs the warm client ~5 ms of import
if TYPE_CHECKING:
    from typing import Any

from fanout.explain import cut, list_lines, lists_compact, probe_text, query_line
from fanout.safe_text import csv_cell, for_terminal, md_text

DEFAULT_SNIPPET = 160  # characters of snippet in text and markdown output


_cut = cut


def _loc(r: dict[str, Any], line_numbers: bool) -> str:
    return f"{r['path']}:{r['line']}" if line_numbers and r.get("line") else r["path"]


def _sec_line(x: dict[str, Any]) -> str:
    """One section of --sections N: its score, ref (what `fanout get` takes) and heading."""
    return f"{x['score']:.3f}  {x['ref']}" + (f"  ({x['heading']})" if x.get("heading") else "")


def _term(text: object) -> str:
    return for_terminal(text)


def render(resp: dict[str, Any], fmt: str = "text", snippet_chars: int = DEFAULT_SNIPPET,
           line_numbers: bool = False, explain: bool = False, full: bool = False) -> str:
    """The printed form of a response; errors are not included (the caller prints them to stderr)."""
    rows = resp["results"]
    multi = len(resp.get("collections") or []) > 1
    facts = resp.get("explain") if explain else None  # per query: query text, probe decision, filter
    if fmt == "files":
        return "\n".join(dict.fromkeys(_term(_loc(r, line_numbers)) for r in rows))
    if fmt == "files0":  # exact paths, each ended by NUL (find -print0, xargs -0)
        return "".join(p + "\0" for p in dict.fromkeys(_loc(r, line_numbers) for r in rows))
    secs = any("sections" in r for r in rows)  # --sections N
    if fmt == "json":
        keep = ["collection"] * multi + ["rank", "path", "title", "heading", "snippet", "score"]
        keep += ["line"] * line_numbers + ["section"] * full + ["sections"] * secs + ["explain"] * explain
        return json.dumps([{k: r.get(k) for k in keep} for r in rows], ensure_ascii=False, indent=2)
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        cols = ["collection"] * multi + ["rank", "path", "title", "heading", "snippet", "score"]
        cols += ["line"] * line_numbers + ["section"] * full + ["sections"] * secs
        cols += ["query", "probe", "explain"] * explain
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            ex = r.get("explain") or {}
            cell = {"explain": lists_compact(ex.get("lists", [])), "query": ex.get("query") or "",
                    "probe": probe_text(ex.get("probe")), "section": (r.get("section") or {}).get("text", ""),
                    "sections": json.dumps(r.get("sections") or [], ensure_ascii=False)}  # a JSON list per cell
            w.writerow([csv_cell(cell[c] if c in cell else r.get(c)) for c in cols])
        return buf.getvalue().rstrip("\n")
    if fmt == "md":
        cols = ["#", "score", "page", "heading", "snippet"] + ["sections"] * secs + ["why"] * explain
        out = [md_text(query_line(facts), table=False), ""] if facts else []
        out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            page = (f"{r['collection']}: " if multi else "") + _loc(r, line_numbers)
            text = (r.get("section") or {}).get("text") if full else None
            snip = _cut(" ".join((text or r["snippet"]).split()), 10_000 if full else snippet_chars)
            cells = [page, r["heading"] or "", snip] + ["; ".join(_sec_line(x) for x in r.get("sections") or [])] * secs
            cells += [lists_compact((r.get("explain") or {}).get("lists", []))] * explain
            out.append("| " + " | ".join([str(r["rank"]), f"{r['score']:.3f}", *map(md_text, cells)]) + " |")
        return "\n".join(out)
    out = [_term(query_line(facts))] if facts else []
    for r in rows:
        head = f" > {r['heading']}" if r["heading"] else ""
        coll = f"[{r['collection']}] " if multi else ""
        out.append(f"{r['rank']:>2}. {r['score']:.3f}  " + _term(f"{coll}{_loc(r, line_numbers)}{head}"))
        if full and r.get("section"):
            sec = r["section"]
            out += ["", for_terminal(sec.get("text"), keep_lines=True) if sec.get("text") else
                    f"      ({_term(sec.get('error', 'section not found'))})", ""]
        else:
            out.append(f"      {_term(_cut(r['snippet'], snippet_chars))}")
        for x in r.get("sections") or []:  # --sections N: `fanout get REF` reads each back
            out.append(f"      - {_term(_sec_line(x))}")
            out.append(f"          {_term(_cut(x['snippet'] or '', snippet_chars))}")
        if explain and r.get("explain"):
            out += [f"      {_term(ln)}" for ln in list_lines(r["explain"])]
    if not rows:
        out.append("no page matched" + (f" with score >= {resp['min_score']}" if resp.get("min_score") else ""))
    return "\n".join(out)
