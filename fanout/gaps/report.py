"""`fanout gaps` output: report.md, report.html (one self-contained page, the plot an inline SVG drawn here),
flagged.parquet (one row per flagged query: qid, query, group, band, score) and groups.parquet.

`fanout analyze OUT` opens the folder: views `flagged` and `groups`. `main_gaps` runs the command
(fanout/gaps/analysis.py finds the gaps, fanout/gaps/groups.py groups them, this module writes them).

Query text and note paths are not trusted: report.html escapes them (html.escape), report.md writes them as
literal markdown text (`md_text`: no HTML, link, image or code span can start) and paths as code spans that
nothing inside can close (`md_code`); both in fanout/safe_text.py.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from fanout.errors import UserError
from fanout.gaps.analysis import FLAGGED
from fanout.gaps.groups import groups_table
from fanout.safe_text import md_code, md_text

if TYPE_CHECKING:
    from fanout.config import Config
    from fanout.config.services import GapsConfig
    from fanout.gaps.analysis import GapsResult
    from fanout.gaps.groups import Group

COLORS = {"lost": "#8e44ad", "unanswered": "#c0392b", "weak": "#e67e22"}
LABELS = {"lost": "lost its page", "unanswered": "unanswered", "weak": "weakly answered"}


def write_report(res: GapsResult, out: Path, g: GapsConfig, source: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(out / "flagged.parquet", FLAGGED) as w:  # streamed from the spool
        for b in res.flagged():
            w.write_batch(b)
    pq.write_table(groups_table(res.groups), out / "groups.parquet")
    (out / "report.md").write_text(markdown(res, g, source), encoding="utf-8")
    (out / "report.html").write_text(page(res, g, source), encoding="utf-8")
    return out


def _summary(res: GapsResult, g: GapsConfig, md: bool = False) -> list[str]:
    """The summary lines; `md`: the index and page paths as safe markdown code spans (else plain, for HTML)."""
    s = res.stats

    def code(x: object) -> str:
        return md_code(x, table=False) if md else str(x)

    return [
        (f"{s.queries} queries read ({s.rows} rows; {s.errors} error rows and {s.bad_lines} unreadable lines "
        f"counted, not used), answered by index {code(s.index)}"),
        f"answered (best score >= {g.weak_below}): {s.answered}",
        f"weakly answered ({g.unanswered_below} <= best < {g.weak_below}): {s.flagged['weak']}",
        f"unanswered (best < {g.unanswered_below}): {s.flagged['unanswered']}",
        *([(f"lost its page (its best page in the previous answers is no longer in the index: "
           f"{', '.join(md_text(p, table=False) if md else p for p in s.lost_pages[:20]) or 'none'}): "
           f"{s.flagged['lost']}")]
          if s.lost_pages is not None else []),
        (f"{res.distinct} distinct flagged questions in {len(res.groups)} groups "
        f"({res.embedded} embedded now, the rest from the query-vector cache)"),
    ]


def _pages_md(gr: Group) -> str:
    parts = []
    for p in gr.pages:
        lacks = f"; no heading on {md_text(', '.join(p['lacks'][:4]))}" if p["lacks"] else ""
        parts.append(f"{md_code(p['path'])} ({p['score']:.2f}{lacks})")
    return "<br>".join(parts) or "none came close"


def _cell(text: str) -> str:
    """Note or query text as one literal markdown table cell (fanout/safe_text.py md_text)."""
    return md_text(text)


def markdown(res: GapsResult, g: GapsConfig, source: str) -> str:
    lines = [f"# What the notes do not answer: {md_code(source, table=False)}", ""]
    lines += [f"- {x}" for x in _summary(res, g, md=True)]
    lines += ["", ("Groups, most asked first. `asks` counts every time a question of the group was asked "
              "(repeats included); the pages are the ones that came closest, with the group's terms that "
              "none of their headings mention."), "",
              "| # | group | asks | questions | band | mean best score | most typical questions | closest pages |",
              "|---|---|---|---|---|---|---|---|"]
    for gr in res.groups[:g.max_groups]:
        num = "-" if gr.gid < 0 else str(gr.gid)
        ex = "<br>".join(_cell(e) for e in gr.examples)
        lines.append(f"| {num} | {_cell(gr.name)} | {gr.asks} | {len(gr.keys)} | {LABELS[gr.band]} | "
                     f"{gr.mean_score:.2f} | {ex} | {_pages_md(gr)} |")
    if len(res.groups) > g.max_groups:
        lines += ["", (f"{len(res.groups) - g.max_groups} smaller groups are left out here (gaps.max_groups); "
                  "groups.parquet has them all.")]
    lines += ["", ("Files: `flagged.parquet` (qid, query, group_id, band, score: one row per flagged query), "
              "`groups.parquet`; `fanout analyze DIR --sql \"select * from groups\"`."), ""]
    return "\n".join(lines)


def plot_svg(groups: list[Group], g: GapsConfig, width: int = 760, height: int = 360) -> str:
    """Groups by size (asks, log scale) and mean best score; circle area ~ distinct questions."""
    left, right, top, bottom = 56, 20, 20, 44
    w, h = width - left - right, height - top - bottom
    shown = [gr for gr in groups[:g.max_groups]]
    max_asks = max([gr.asks for gr in shown] + [10])
    xmin, xmax = math.log10(0.7), math.log10(max_asks) * 1.1  # room for the circles at 1 ask
    ymax = max(g.weak_below, 0.05) + 0.05

    def x(asks: int) -> float:
        return left + w * (math.log10(max(asks, 1)) - xmin) / (xmax - xmin)

    def y(score: float) -> float:
        return top + h * (1 - min(max(score, 0.0), ymax) / ymax)

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="groups by asks and score">'),
           f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="#fafafa" stroke="#ccc"/>',
           (f'<rect x="{left}" y="{y(g.unanswered_below):.1f}" width="{w}" '
           f'height="{y(0) - y(g.unanswered_below):.1f}" fill="#c0392b" fill-opacity="0.06"/>'),
           (f'<line x1="{left}" x2="{left + w}" y1="{y(g.unanswered_below):.1f}" y2="{y(g.unanswered_below):.1f}" '
           f'stroke="#c0392b" stroke-dasharray="4 3"/>'),
           (f'<text x="{left + w - 4}" y="{y(g.unanswered_below) - 4:.1f}" text-anchor="end" font-size="11" '
           f'fill="#c0392b">unanswered below {g.unanswered_below}</text>')]
    ticks = [m * 10 ** e for e in range(int(xmax) + 1) for m in (1, 2, 5) if m * 10 ** e <= 10 ** xmax * 0.95]
    for v in ticks:
        px = x(v)
        out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top + h}" y2="{top + h + 4}" stroke="#888"/>'
                   f'<text x="{px:.1f}" y="{top + h + 16}" text-anchor="middle" font-size="11">{v:,}</text>')
    for sv in (0.0, 0.2, 0.4, 0.6, 0.8):
        out.append(f'<text x="{left - 6}" y="{y(sv) + 4:.1f}" text-anchor="end" font-size="11">{sv:.2f}</text>')
    out.append(f'<text x="{left + w / 2}" y="{height - 8}" text-anchor="middle" font-size="12">asks (log scale)'
               f'</text><text x="14" y="{top + h / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 14 {top + h / 2})">mean best score</text>')
    placed: list[tuple[float, float, float]] = []
    for gr in sorted(shown, key=lambda gr: -len(gr.keys)):  # big circles first, small ones stay visible
        r = min(4 + 3 * math.sqrt(len(gr.keys)), 40)
        x0, y0 = x(gr.asks), y(gr.mean_score)
        cx, cy = x0, y0
        for step in range(1, 200):  # groups on one spot (same asks and score): a spiral around it, in the frame
            if all((cx - px) ** 2 + (cy - py) ** 2 >= (0.9 * (r + pr)) ** 2 for px, py, pr in placed):
                break
            d = 0.9 * r * math.sqrt(step)
            cx = min(max(x0 + d * math.cos(2.4 * step), left + r), left + w - r)
            cy = min(max(y0 + 0.4 * d * math.sin(2.4 * step), top + r), top + h - r)  # mostly sideways
        placed.append((cx, cy, r))
        label = "-" if gr.gid < 0 else str(gr.gid)
        tip = html.escape(f"#{label} {gr.name}: {gr.asks} asks, {len(gr.keys)} questions, mean score "
                          f"{gr.mean_score:.2f}; e.g. {gr.examples[0] if gr.examples else ''}")
        out.append(f'<g class="group"><title>{tip}</title><circle cx="{cx:.1f}" cy="{cy:.1f}" '
                   f'r="{r:.1f}" fill="{COLORS[gr.band]}" fill-opacity="0.55" stroke="{COLORS[gr.band]}"/>'
                   f'<text x="{cx:.1f}" y="{cy + 4:.1f}" text-anchor="middle" font-size="10">{label}</text></g>')
    out.append("</svg>")
    return "".join(out)


CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #ddd;padding:6px;text-align:left;vertical-align:top}th{background:#f3f3f3}
.band{display:inline-block;padding:1px 6px;border-radius:8px;color:#fff;font-size:11px}
.lost{background:#8e44ad}.unanswered{background:#c0392b}.weak{background:#e67e22}.lacks{color:#777;font-size:12px}
ul.summary{font-size:14px}code{font-size:12px}"""


def page(res: GapsResult, g: GapsConfig, source: str) -> str:
    e = html.escape
    rows = []
    for gr in res.groups[:g.max_groups]:
        label = "-" if gr.gid < 0 else str(gr.gid)
        pages = "".join(
            f"<div><code>{e(p['path'])}</code> {p['score']:.2f}"
            + (f"<div class=lacks>no heading on: {e(', '.join(p['lacks'][:4]))}</div>" if p["lacks"] else "")
            + "</div>" for p in gr.pages) or "none came close"
        rows.append(f'<tr class="group-row"><td>{label}</td><td><b>{e(gr.name)}</b><br>'
                    f'<span class=lacks>{e(", ".join(gr.terms))}</span></td><td>{gr.asks}</td>'
                    f'<td>{len(gr.keys)}</td><td><span class="band {gr.band}">{LABELS[gr.band]}</span></td>'
                    f'<td>{gr.mean_score:.2f}</td><td>{"<br>".join(e(x) for x in gr.examples)}</td>'
                    f'<td>{pages}</td></tr>')
    summary = "".join(f"<li>{e(s)}</li>" for s in _summary(res, g))
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>fanout gaps: {e(source)}</title>'
            f'<style>{CSS}</style></head><body><h1>What the notes do not answer</h1><p><code>{e(source)}</code></p>'
            f'<ul class="summary">{summary}</ul><h2>Groups by how often they were asked and how well</h2>'
            f'{plot_svg(res.groups, g)}<h2>Groups</h2><table><thead><tr><th>#</th><th>group</th><th>asks</th>'
            f'<th>questions</th><th>band</th><th>mean best score</th><th>most typical questions</th>'
            f'<th>closest pages</th></tr></thead><tbody>{"".join(rows)}</tbody></table></body></html>\n')


def make_report(answers: str, out: str | Path, db: str, collection: str, cfg: Config,
                previous: str | None = None, progress: Any = None) -> GapsResult:
    """`fanout gaps`: read the answers, find and group the gaps, write report.md, report.html,
    flagged.parquet and groups.parquet into `out`; returns the result (its `stats`, `groups`)."""
    from fanout.gaps.analysis import find_gaps

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out)!r} is a file; --out names a folder for report.md, report.html and the "
                        f"parquet files (made if missing): give another name, or remove that file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {str(out)!r}: cannot make the folder ({e.strerror or e}); give a folder you can "
                        f"write to") from None
    spool = out / ".flagged.spool.parquet"
    try:
        res = find_gaps(answers, db, collection, cfg, spool, progress=progress, previous=previous)
        write_report(res, out, cfg.gaps, answers)
    finally:
        spool.unlink(missing_ok=True)
    return res


def summary_text(res: GapsResult, out: str | Path) -> str:
    """The lines `fanout gaps` prints after a report."""
    s, out = res.stats, Path(out)
    return (f"{s.queries} queries ({s.errors} error rows, {s.bad_lines} unreadable lines): {s.answered} answered, "
            f"{s.flagged['weak']} weakly answered, {s.flagged['unanswered']} unanswered, {s.flagged['lost']} lost "
            f"their page -> {len(res.groups)} groups "
            f"of {res.distinct} distinct questions ({res.embedded} embedded, not in the cache)\n"
            f"report: {out / 'report.md'}, {out / 'report.html'}; flagged queries: {out / 'flagged.parquet'}")
