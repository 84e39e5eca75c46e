"""`python -m fanout.evaluation.matrix ROWS.yaml`: many named configurations over the benchmark, one report.

`fanout eval` runs fixed modes under one config; issue 11 needs rows that differ in config (lanes, weights,
the expander model and prompt format, rerank) side by side: one table (published rows + ours with 95%
bootstrap intervals), a per-category table, paired bootstraps between named rows (and published runs), and
per-query seconds per row, split by model role (embedder / expander / reranker) from the runner's clocks.

A rows file is YAML: `rows: [{name, fields: bool, fields_from: PREFIX, expand: bool, rerank: bool, config: PROFILE,
limit: N or {lang: N}, set: {section.key: value}}, ...]`, `pairs: [[a, b], ...]` (b may be a published run, e.g. fields-w1).
`fields_from` reads the row's agent fields from `PREFIX-en.json` / `PREFIX-ru.json` (the benchmark's
agent-fields format) instead of the strong agent's (bench/weak_fields/weak_fields.py writes such files). Each row gets a fresh
in-process runner (models load per row); results, variants and run files go under --out as parquet/JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from fanout.errors import InputMissing

log = logging.getLogger(__name__)

ROLES = ("embedder", "expander", "reranker")


def row_config(row: dict[str, Any], base_overrides: dict[str, Any]):
    from fanout.config import load_config
    from fanout.evaluation.evaluate import _overrides

    cfg = load_config(row.get("config") or "local")
    sets = {**base_overrides, **(row.get("set") or {})}
    changes = _overrides([f"{k}={json.dumps(v)}" for k, v in sets.items()])
    return cfg.replace(**changes) if changes else cfg


def run_rows(spec: dict[str, Any], args: argparse.Namespace) -> None:
    from fanout.evaluation.bench_data import load_agent_fields, load_queries
    from fanout.evaluation.evaluate import FIELDS, mode_rows
    from fanout.evaluation.score_runs import per_query_metrics, write_run
    from fanout.exec.runner import Runner
    from fanout.pipelines.search import Searcher, SearchOptions

    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    queries = load_queries(args.bench)
    fields = load_agent_fields(args.bench)
    only = set(args.rows.split(",")) if args.rows else None
    done: set[tuple[str, str]] = set()
    if args.resume and (out / "timings.parquet").exists():
        done = {(t["row"], t["lang"]) for t in pq.read_table(out / "timings.parquet").to_pylist()}
    per_query, timings = [], []
    for row in spec["rows"]:
        name = row["name"]
        if only and name not in only:
            continue
        cfg = row_config(row, spec.get("set") or {})
        use = FIELDS if row.get("fields") else tuple(row.get("agent_fields") or ())
        row_fields = fields_from(row["fields_from"], args.langs.split(",")) if row.get("fields_from") else fields
        for lang in args.langs.split(","):
            if (name, lang) in done:
                continue
            qs = [q for q in queries if q["lang"] == lang]
            limit = row.get("limit", args.limit)
            if isinstance(limit, dict):  # per language, e.g. {en: 10, ru: 5}
                limit = limit.get(lang, args.limit)
            if limit:
                qs = [q for s in ("base", "tricky") for q in [x for x in qs if x["subset"] == s][:limit]]
            with Runner(cfg) as runner:
                searcher = Searcher(args.db, f"bench-{lang}", cfg, runner)
                t = time.perf_counter()
                res = searcher.search(mode_rows(qs, row_fields, use),
                                      SearchOptions(n=20, expand=bool(row.get("expand")),
                                                    rerank=bool(row.get("rerank"))))
                secs = time.perf_counter() - t
                model_s = {r: runner.seconds.get(r, 0.0) for r in ROLES}
                calls = {r: runner.calls.get(r, 0) for r in ROLES}
            run: dict[str, list[str]] = {}
            for r in res.results.to_pylist():
                run.setdefault(r["qid"], []).append(r["path"])
            write_run(out / "runs" / f"{name}-{lang}.json", name, run, lang=lang)
            per_query.append(per_query_metrics(run, qs, system=name))
            n = max(1, len(qs))
            timings.append({"row": name, "lang": lang, "queries": len(qs), "seconds": secs,
                            "ms_per_query": 1000 * secs / n,
                            **{f"{r}_s_per_query": model_s[r] / n for r in ROLES},
                            **{f"{r}_calls": calls[r] for r in ROLES},
                            "clean_ms_per_query": 1000 * sum(v for k, v in res.timings.items()
                                                             if k.startswith("CleanFields")) / n,
                            "expansion": json.dumps(res.stats.get("expansion", {})),
                            "cache": json.dumps(res.stats.get("cache", {}), default=str)})
            pq.write_table(res.variants, out / f"variants-{name}-{lang}.parquet")
            save(out, per_query[-1], timings[-1:])  # each row as it finishes: a killed run keeps its rows
            log.info("%s %s: %d queries in %.1fs (model s: %s; expansion %s)", name, lang, len(qs), secs,
                     {r: round(v, 1) for r, v in model_s.items() if v}, res.stats.get("expansion"))


def fields_from(prefix: str, langs: list[str]) -> dict[str, dict[str, str]]:
    """A row's own agent fields: `PREFIX-<lang>.json` per language, keyed `<lang>:<id>`."""
    from fanout.evaluation.bench_data import read_agent_fields

    out: dict[str, dict[str, str]] = {}
    for lang in langs:
        path = Path(f"{prefix}-{lang}.json")
        if not path.is_file():
            raise InputMissing(f"fields_from: {path} not found; write it first (e.g. python "
                               "bench/weak_fields/weak_fields.py) or fix the row's `fields_from` prefix")
        out.update(read_agent_fields(path, lang))
    return out


def save(out: Path, per_query: pa.Table, timings: list[dict]) -> None:
    """Merge one finished row into --out's per_query/timings parquet files (replacing its older results)."""
    rows = {(t["row"], t["lang"]) for t in timings}
    pq_path, t_path = out / "per_query.parquet", out / "timings.parquet"
    if pq_path.exists():
        old = pq.read_table(pq_path)
        keep = [i for i, (s, lg) in enumerate(zip(old["system"].to_pylist(), old["lang"].to_pylist()))
                if (s, lg) not in rows]
        per_query = pa.concat_tables([old.take(keep), per_query], promote_options="default")
    if t_path.exists():
        timings = [t for t in pq.read_table(t_path).to_pylist() if (t["row"], t["lang"]) not in rows] + timings
    pq.write_table(per_query, pq_path)
    pq.write_table(pa.Table.from_pylist(timings), t_path)


def render(per_query: pa.Table, timings: list[dict], spec: dict[str, Any], args: argparse.Namespace) -> str:
    from fanout.evaluation.bench_data import load_published_runs, load_queries
    from fanout.evaluation.bootstrap_ci import paired_diff, set_intervals
    from fanout.evaluation.report import (
        category_table,
        pair_side,
        published_rows,
        render_markdown,
        with_intervals,
    )
    from fanout.evaluation.score_runs import summarize

    desc = {r["name"]: r.get("description", r["name"]) for r in spec["rows"]}
    summary = summarize(per_query)
    rows = published_rows(args.bench) + with_intervals(summary, set_intervals(per_query, "ndcg_5", args.n_boot))
    for r in rows:
        r.setdefault("description", desc.get(r["system"], r["system"]))
    hit1 = summarize(per_query).select(["system", "set", "hit_1"]).to_pylist() \
        if "hit_1" in per_query.column_names else []
    lines = [f"# eval matrix\n\nrows file: {args.spec}; limit per set: {args.limit or 'all'}\n",
             "## nDCG@5 [95% bootstrap] (Recall@10)\n", render_markdown(rows)]
    if hit1:
        by: dict[Any, Any] = {}
        for r in hit1:
            by.setdefault(r["system"], {})[r["set"]] = r["hit_1"]
        lines += ["\n## Hit@1\n", "| row | en-base | en-tricky | ru-base | ru-tricky |", "|---|---|---|---|---|"]
        lines += [f"| {s} | " + " | ".join(f"{v.get(k, float('nan')):.3f}" for k in
                                            ("en-base", "en-tricky", "ru-base", "ru-tricky")) + " |"
                  for s, v in by.items()]
    lines += ["\n## per category (nDCG@5)\n", category_table(per_query)]
    lines += ["## seconds per query (wall; model time per role from the runner)\n",
              ("| row | lang | queries | ms/query | hygiene ms/q | embedder s/q | expander s/q | reranker s/q | "
               "expansion |"), "|---|---|---|---|---|---|---|---|---|"]
    for t in timings:
        lines.append(f"| {t['row']} | {t['lang']} | {t['queries']} | {t['ms_per_query']:.0f} | "
                     f"{t.get('clean_ms_per_query') or 0:.2f} | "
                     f"{t['embedder_s_per_query']:.3f} | {t['expander_s_per_query']:.2f} | "
                     f"{t['reranker_s_per_query']:.2f} | {t['expansion']} |")
    published = load_published_runs(args.bench)
    queries = load_queries(args.bench)
    ours = {s: per_query.filter(pa.compute.equal(per_query["system"], s))
            for s in set(per_query["system"].to_pylist())}
    lines += ["\n## paired bootstrap, nDCG@5 difference a - b (95% interval; p = share of resamples <= 0)\n",
              "| a - b | set | n | mean | interval | p |", "|---|---|---|---|---|---|"]
    for a, b in spec.get("pairs") or []:
        if a not in ours:
            continue
        tb = pair_side(ours, published, queries, a, b)
        if tb is None:
            continue
        for name, d in paired_diff(ours[a], tb, "ndcg_5", args.n_boot).items():
            lines.append(f"| {a} - {b} | {name} | {d['n']} | {d['mean_diff']:+.3f} | {d['interval']} | "
                         f"{d['p_le_zero']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fanout.evaluation.matrix")
    ap.add_argument("spec", help="rows YAML (see the module docstring)")
    ap.add_argument("--db", default=".fanout/bench-db")
    ap.add_argument("--bench", default=None)
    ap.add_argument("--out", default="out/matrix")
    ap.add_argument("--langs", default="en,ru")
    ap.add_argument("--limit", type=int, default=0, help="first N queries of each set (0 = all)")
    ap.add_argument("--rows", default="", help="comma list: run only these rows")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--report-only", action="store_true", help="re-render from --out's parquet files")
    ap.add_argument("--resume", action="store_true", help="skip rows (and languages) already in --out")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec = yaml.safe_load(Path(args.spec).read_text(encoding="utf-8"))
    out = Path(args.out)
    if not args.report_only:
        run_rows(spec, args)  # writes each finished row into --out
    per_query = pq.read_table(out / "per_query.parquet")
    timings = pq.read_table(out / "timings.parquet").to_pylist()
    order = [r["name"] for r in spec["rows"]]
    idx = {n: i for i, n in enumerate(order)}
    per_query = per_query.take(sorted(range(per_query.num_rows),
                                      key=lambda i: idx.get(per_query["system"][i].as_py(), 99)))
    timings = sorted(timings, key=lambda t: (idx.get(t["row"], 99), t["lang"]))
    report = render(per_query, timings, spec, args)
    (out / "report.md").write_text(report, encoding="utf-8")
    sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
