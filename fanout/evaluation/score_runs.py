"""Retrieval metrics for the Obsidian Help benchmark, with run-file IO.

Rules (as trip2g and obsidian-hybrid-search compute them, see the benchmark README):
ranked list = page paths, NFC-normalised, deduped keeping the first occurrence; gain 1.0 relevant,
0.5 partial; DCG = sum gain_i / log2(i + 2), i from 0; IDCG from ``[1.0]*len(relevant) +
[0.5]*len(partial)`` cut to k; Recall@10, MRR and Hit@k count relevant pages only (a query with no
relevant page scores 0 on them); a query with no results, or missing from the run, scores 0;
each of the four sets (en/ru x base/tricky) is averaged separately.

No metrics library is used: ranx, pytrec_eval (pytrec-eval-terrier) and ir-measures are installable,
but trec_eval-style tools take integer relevance grades and scored runs (the 0.5 gain must be scaled
and ties broken by doc id), drop queries missing from the run instead of scoring 0, and know nothing
of NFC or page dedupe, so the rules above would still be implemented here around them; the metrics
themselves are a few lines. ``tests/test_score_runs.py`` cross-checks against pytrec_eval on
integer-scaled gains (2 = relevant, 1 = partial) when it is installed.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from fanout.errors import UserError
from fanout.evaluation.bench_data import nfc, parse_run, run_name_parts, set_key

logger = logging.getLogger(__name__)

METRICS: tuple[str, ...] = ("ndcg_5", "ndcg_10", "recall_10", "mrr", "hit_1", "hit_5")
GAIN_RELEVANT = 1.0
GAIN_PARTIAL = 0.5


def ranked_pages(paths: Iterable[str]) -> list[str]:
    """Return NFC-normalised paths deduped keeping the first occurrence."""
    seen: set[str] = set()
    out: list[str] = []
    for p in paths:
        key = nfc(p)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def ndcg_at(ranked: Sequence[str], relevant: set[str], partial: set[str], k: int) -> float:
    """Return nDCG@k with gain 1.0 for relevant and 0.5 for partial pages."""
    dcg = 0.0
    for i, page in enumerate(ranked[:k]):
        gain = GAIN_RELEVANT if page in relevant else GAIN_PARTIAL if page in partial else 0.0
        dcg += gain / math.log2(i + 2)
    ideal = ([GAIN_RELEVANT] * len(relevant) + [GAIN_PARTIAL] * len(partial))[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def query_metrics(
    paths: Sequence[str] | None, relevant: Iterable[str], partial: Iterable[str]
) -> dict[str, float]:
    """Return every metric of one query; ``paths`` None or empty scores 0."""
    ranked = ranked_pages(paths or [])
    rel = {nfc(p) for p in relevant}
    par = {nfc(p) for p in partial} - rel
    first = next((i for i, p in enumerate(ranked) if p in rel), None)
    return {
        "ndcg_5": ndcg_at(ranked, rel, par, 5),
        "ndcg_10": ndcg_at(ranked, rel, par, 10),
        "recall_10": len(rel.intersection(ranked[:10])) / len(rel) if rel else 0.0,
        "mrr": 1.0 / (first + 1) if first is not None else 0.0,
        "hit_1": 1.0 if first is not None and first < 1 else 0.0,
        "hit_5": 1.0 if first is not None and first < 5 else 0.0,
    }


def per_query_metrics(
    run: Mapping[str, Sequence[str]], queries: Sequence[Mapping[str, Any]], system: str = "run"
) -> pa.Table:
    """Score a run ``{<lang>:<id>: [paths]}`` on ``queries``: one row per query.

    Columns: system, id, lang, subset, set, category, n_results and the metrics in :data:`METRICS`.
    """
    rows: dict[str, list[Any]] = {c: [] for c in ("system", "id", "lang", "subset", "set", "category")}
    rows["n_results"] = []
    rows.update({m: [] for m in METRICS})
    missing = 0
    for q in queries:
        paths = run.get(q["id"])
        missing += paths is None
        scores = query_metrics(paths, q.get("relevant") or [], q.get("partial") or [])
        rows["system"].append(system)
        rows["id"].append(q["id"])
        rows["lang"].append(q.get("lang") or "")
        rows["subset"].append(q.get("subset") or "")
        rows["set"].append(q.get("set") or f"{q['lang']}-{q['subset']}")
        rows["category"].append(q.get("category") or "")
        rows["n_results"].append(len(paths or []))
        for m in METRICS:
            rows[m].append(scores[m])
    if missing:
        logger.warning("%s: %d of %d queries missing from the run (scored 0)", system, missing, len(queries))
    return pa.table(rows)


def summarize(per_query: pa.Table) -> pa.Table:
    """Return per (system, set) the query count ``n`` and the mean of each metric."""
    grouped = per_query.group_by(["system", "set"], use_threads=False).aggregate(
        [("id", "count")] + [(m, "mean") for m in METRICS]
    )
    grouped = grouped.rename_columns(
        {"id_count": "n", **{f"{m}_mean": m for m in METRICS}}
    )
    systems = list(dict.fromkeys(per_query.column("system").to_pylist()))
    rows = sorted(
        grouped.to_pylist(),
        key=lambda r: (systems.index(r["system"]), set_key(r["set"])),
    )
    cols = ["system", "set", "n", *METRICS]
    return pa.Table.from_pylist([{c: r[c] for c in cols} for r in rows], schema=grouped.select(cols).schema)


def read_run(path: str | Path, lang: str | None = None) -> tuple[str, dict[str, list[str]]]:
    """Read a run file ``{"system": ..., "results": {id: [paths]}}``.

    Args:
        path: run file; its language comes from a ``-en``/``-ru`` name suffix unless ``lang`` is given.
        lang: vault language of the run's golden ids.

    Returns:
        ``(system, {<lang>:<id>: [paths]})``.
    """
    name_system, name_lang = run_name_parts(path)
    lang = lang or name_lang
    if lang is None:
        raise UserError(f"cannot tell the language of {path}: name it <system>-en/-ru.json or pass lang")
    obj = json.loads(Path(path).read_text(encoding="utf-8"))
    return str(obj.get("system") or name_system), parse_run(obj, lang)


def write_run(
    path: str | Path, system: str, run: Mapping[str, Sequence[str]], lang: str | None = None
) -> Path:
    """Write a run file with golden ids (``<lang>:`` prefix stripped), keeping only ``lang`` if given."""
    results: dict[str, list[str]] = {}
    for qid, paths in run.items():
        q_lang, _, orig = qid.rpartition(":")
        if lang is None or q_lang in ("", lang):
            results[orig] = list(paths)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"system": system, "results": results}, ensure_ascii=False, indent=1), "utf-8")
    return out


def score_files(paths: Iterable[str | Path], queries: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Score run files, merged per system; each system is scored only on its files' languages."""
    runs: dict[str, dict[str, list[str]]] = {}
    langs: dict[str, set[str]] = {}
    for path in paths:
        system, run = read_run(path)
        runs.setdefault(system, {}).update(run)
        langs.setdefault(system, set()).update(q.split(":", 1)[0] for q in run)
    tables = [
        per_query_metrics(run, [q for q in queries if q["lang"] in langs[system]], system)
        for system, run in runs.items()
    ]
    return pa.concat_tables(tables) if tables else per_query_metrics({}, [], "run")
