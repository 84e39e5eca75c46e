"""Benchmark report: the published-layout markdown table and a per-set interval plot.

Summary rows are dicts with ``system``, ``set``, ``ndcg_5``, ``recall_10`` and optionally ``low`` /
``high`` (95% interval of nDCG@5), ``description`` and ``published`` (drawn grey in the plot).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from fanout.evaluation.bench_data import SET_TITLES, SETS, load_published_table, load_queries, set_key
from fanout.evaluation.bootstrap_ci import DEFAULT_N_BOOT, DEFAULT_SEED, set_intervals
from fanout.evaluation.score_runs import score_files, summarize

logger = logging.getLogger(__name__)

Row = Mapping[str, Any]
METRIC_TITLES: dict[str, str] = {
    "ndcg_5": "nDCG@5",
    "ndcg_10": "nDCG@10",
    "recall_10": "Recall@10",
    "mrr": "MRR",
    "hit_1": "Hit@1",
    "hit_5": "Hit@5",
}


def _as_rows(rows: pa.Table | Iterable[Row]) -> list[Row]:
    return rows.to_pylist() if isinstance(rows, pa.Table) else list(rows)


def _frac(x: float) -> str:
    """Format a [0, 1] value without the leading zero (``.931``); 1 stays ``1.00`` as published."""
    return "1.00" if round(x, 3) >= 1.0 else f"{x:.3f}".removeprefix("0")


def format_cell(row: Row) -> str:
    """Return ``"0.726 (.931)"``, with ``" [.690–.760]"`` after nDCG@5 when an interval is given."""
    ci = ""
    if row.get("low") is not None and row.get("high") is not None and not math.isnan(row["low"] + row["high"]):
        ci = f" [{_frac(row['low'])}–{_frac(row['high'])}]"
    return f"{row['ndcg_5']:.3f}{ci} ({_frac(row['recall_10'])})"


def sets_of(rows: Sequence[Row]) -> tuple[str, ...]:
    """The columns: the benchmark's four sets when every row is one of them, else the rows' own sets."""
    names = {r["set"] for r in rows}
    return SETS if names <= set(SETS) else tuple(sorted(names, key=set_key))


def render_markdown(summary_rows: pa.Table | Iterable[Row]) -> str:
    """Render rows = systems, columns = the sets (the benchmark's four, or your own); cells nDCG@5 (Recall@10)."""
    by_system: dict[tuple[str, bool], dict[str, Row]] = {}
    desc: dict[tuple[str, bool], str] = {}
    rows = _as_rows(summary_rows)
    sets = sets_of(rows)
    for row in rows:
        key = (row["system"], bool(row.get("published")))
        by_system.setdefault(key, {})[row["set"]] = row
        desc.setdefault(key, row.get("description") or row["system"])
    lines = [
        "| run | system | " + " | ".join(SET_TITLES.get(s, s) for s in sets) + " |",
        "|---|---|" + "---|" * len(sets),
    ]
    for key, cells in by_system.items():
        vals = [format_cell(cells[s]) if s in cells else "–" for s in sets]
        lines.append(f"| {key[0]} | {desc[key]} | " + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


def published_rows(bench_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Return the README's published table as summary rows flagged ``published``."""
    out = []
    for system, row in load_published_table(bench_dir).items():
        for name in SETS:
            ndcg, recall = row[name]
            out.append(
                {
                    "system": system,
                    "set": name,
                    "ndcg_5": ndcg,
                    "recall_10": recall,
                    "description": row["system"],
                    "published": True,
                }
            )
    return out


def with_intervals(summary: pa.Table | Iterable[Row], intervals: pa.Table) -> list[dict[str, Any]]:
    """Attach ``low``/``high`` from :func:`set_intervals` output to matching summary rows."""
    ci = {(r["system"], r["set"]): r for r in intervals.to_pylist()}
    out = []
    for row in _as_rows(summary):
        hit = ci.get((row["system"], row["set"]))
        out.append({**row, **({"low": hit["low"], "high": hit["high"]} if hit else {})})
    return out


def _label(row: Row, rows: Sequence[Row]) -> str:
    """Return the row's system name, suffixed " (ours)" when a published row has the same name."""
    twin = any(r.get("published") and r["system"] == row["system"] for r in rows)
    clash = twin and not row.get("published")
    return f"{row['system']} (ours)" if clash else str(row["system"])


def plot_sets(rows: pa.Table | Iterable[Row], path: str | Path, metric: str = "ndcg_5") -> Path:
    """Save a PNG with one panel per set: nDCG@5 points with interval whiskers per system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    raw = _as_rows(rows)
    data = [{**r, "label": _label(r, raw)} for r in raw]
    x_min = min([0.4] + [float(r["low"] if r.get("low") is not None else r[metric]) - 0.05 for r in raw])
    systems = list(dict.fromkeys(r["label"] for r in data))
    published = {r["label"] for r in data if r.get("published")}
    palette = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]  # tab10 is a ListedColormap
    ours = [s for s in systems if s not in published]
    colour = {s: ("0.55" if s in published else palette[ours.index(s) % len(palette)]) for s in systems}
    sets = sets_of(raw)
    fig, grid = plt.subplots(1, len(sets), figsize=(max(5, 3.75 * len(sets)), 1.4 + 0.42 * len(systems)),
                             sharey=True, squeeze=False)
    axes = grid[0]
    for ax, name in zip(axes, sets, strict=True):
        for y, system in enumerate(systems):
            row = next((r for r in data if r["label"] == system and r["set"] == name), None)
            if row is None:
                continue
            x = float(row[metric])
            err = None
            if row.get("low") is not None and row.get("high") is not None:
                err = [[x - float(row["low"])], [float(row["high"]) - x]]
            size = 6 if system in ours else 5
            ax.errorbar(x, y, xerr=err, fmt="o", color=colour[system], capsize=3, ms=size)
            ax.annotate(
                f"{x:.3f}",
                (x, y),
                textcoords="offset points",
                xytext=(0, 7),
                ha="center",
                fontsize=7,
                color=colour[system],
            )
        ax.set_title(SET_TITLES.get(name, name))
        ax.set_xlim(max(0.0, x_min), 1.0)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel(METRIC_TITLES.get(metric, metric))
    axes[0].set_yticks(range(len(systems)), systems)
    axes[0].set_ylim(len(systems) - 0.5, -0.7)
    for label in axes[0].get_yticklabels():
        label.set_color(colour[label.get_text()] if label.get_text() in ours else "0.35")
    title = METRIC_TITLES.get(metric, metric)
    fig.suptitle(f"{title} per set (grey: published, colour: ours; whiskers: 95% bootstrap CI)", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def score_runs_cli(
    paths: Sequence[str | Path],
    bench_dir: str | Path | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    include_published: bool = False,
) -> str:
    """Score run files and return the published-layout table (95% CIs on unpublished systems).

    Args:
        paths: run files named ``<system>-en.json`` / ``<system>-ru.json``.
        bench_dir: benchmark folder (default: ``$FANOUT_BENCH`` or ``../shared/eval/obsidian-help``).
        n_boot: bootstrap resamples for the intervals (0 disables them).
        seed: bootstrap seed.
        include_published: also list the README's published rows first.
    """
    per_query = score_files(paths, load_queries(bench_dir))
    summary = summarize(per_query).to_pylist()
    published = load_published_table(bench_dir)
    if n_boot > 0:
        keep = [s not in published for s in per_query.column("system").to_pylist()]
        ours = per_query.filter(pa.array(keep, pa.bool_()))
        summary = with_intervals(summary, set_intervals(ours, "ndcg_5", n_boot, seed))
    for row in summary:
        row["description"] = published[row["system"]]["system"] if row["system"] in published else ""
    rows = (published_rows(bench_dir) if include_published else []) + list(summary)
    return render_markdown(rows)


PAIRS = (("fields", "fields-w1"), ("short", "fields-short"), ("hybrid", "trip2g-alias"), ("fields", "hybrid"))
OWN_PAIRS = (("fields", "hybrid"), ("hybrid", "bm25"), ("hybrid", "vector"))


def pair_side(ours: dict, published: dict, queries: list[dict], a: str, b: str):
    """Per-query metrics of system `b` to pair with our system `a`: our own run, or a published run scored on
    a's queries; None when there is neither."""
    from fanout.evaluation.score_runs import per_query_metrics

    if b in ours:
        return ours[b]
    if b in published:
        ids = set(ours[a]["id"].to_pylist())
        return per_query_metrics(published[b], [q for q in queries if q["id"] in ids], system=b)
    return None



def paired_section(per_query: pa.Table, bench: str | Path | None, n_boot: int, with_published: bool = True) -> str:
    """Paired bootstrap of nDCG@5 differences: on the benchmark against the closest published runs (same
    queries); on your own data (`with_published=False`) between our own modes."""
    import pyarrow as pa

    from fanout.evaluation.bootstrap_ci import paired_diff

    published, queries = {}, []
    if with_published:
        from fanout.evaluation.bench_data import load_published_runs, load_queries

        published, queries = load_published_runs(bench), load_queries(bench)
    ours = {s.removeprefix("fanout-"): per_query.filter(pa.compute.equal(per_query["system"], s))
            for s in set(per_query["system"].to_pylist())}
    lines = ["\n## paired bootstrap, nDCG@5 difference (95% interval)\n", "| ours - other | set | n | mean | interval |",
             "|---|---|---|---|---|"]
    for mine, other in PAIRS if published else OWN_PAIRS:
        if mine not in ours:
            continue
        b = pair_side(ours, published, queries, mine, other)
        if b is None:
            continue
        for name, d in paired_diff(ours[mine], b, "ndcg_5", n_boot).items():
            lines.append(f"| {mine} - {other} | {name} | {d['n']} | {d['mean_diff']:+.3f} | {d['interval']} |")
    return "\n".join(lines) + "\n"


def category_table(per_query: pa.Table) -> str:
    import duckdb

    t = per_query  # noqa: F841 - read by duckdb by name
    rel = duckdb.sql("select system, coalesce(nullif(concat_ws(':', nullif(lang, ''), nullif(category, '')), ''),"
                     " '-') as cat, count(*) n, avg(ndcg_5) v from t group by all order by cat, system")
    assert rel is not None  # a SELECT always gives a relation (None is for statements)
    rows = rel.fetchall()
    systems = list(dict.fromkeys(r[0] for r in rows))
    cats = list(dict.fromkeys(r[1] for r in rows))
    val = {(r[0], r[1]): (r[2], r[3]) for r in rows}
    lines = ["| category | n | " + " | ".join(s.replace("fanout-", "") for s in systems) + " |",
             "|---|---|" + "---|" * len(systems)]
    for c in cats:
        n = next(val[(s, c)][0] for s in systems if (s, c) in val)
        cells = [f"{val[(s, c)][1]:.3f}" if (s, c) in val else "–" for s in systems]
        lines.append(f"| {c} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
