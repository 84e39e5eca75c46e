"""Pipeline: run the search pipeline over a judged benchmark in several modes and score it.

Modes are ablations (bm25, vector, hybrid, + local expansion, + each agent field alone, + all fields), each
optionally with rerank (`<mode>+rerank`). Per language one index (`bench-<lang>` collection); per mode the
benchmark's run files, per-query metrics, timings and the variants used are written under --out as
parquet/JSON, then a markdown table in the published layout (with our rows and 95% bootstrap intervals) and a
PNG plot. duckdb SQL over those files: `fanout analyze OUT`.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fanout.config import Config

log = logging.getLogger(__name__)

FIELDS = ("short_query", "rephrased_query", "expected_answer")
# mode -> (config changes, agent fields used, local expansion)
MODES: dict[str, tuple[dict, tuple[str, ...], bool]] = {
    "bm25": ({"retrieve": {"lanes": ["fts"]}}, (), False),
    "vector": ({"retrieve": {"lanes": ["vec"]}}, (), False),
    "hybrid": ({}, (), False),
    "expand": ({}, (), True),
    "short": ({}, ("short_query",), False),
    "rephrased": ({}, ("rephrased_query",), False),
    "expected": ({}, ("expected_answer",), False),
    "fields": ({}, FIELDS, False),
}
DEFAULT_MODES = "bm25,vector,hybrid,short,rephrased,expected,fields"


def add_eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bench", default=None, help="benchmark folder (default $FANOUT_BENCH or ../shared/...)")
    p.add_argument("--queries", default=None, help="judged queries JSONL (default: the benchmark's)")
    p.add_argument("--corpus", default=None, help="corpus root with en/ and ru/ (default: the benchmark's)")
    p.add_argument("--db", default=".fanout/bench-db", help="LanceDB folder for the benchmark indexes")
    p.add_argument("--fields", nargs="*", default=None, help="agent fields files (default: the benchmark's)")
    p.add_argument("--out", default="out/eval", help="output folder")
    p.add_argument("--modes", default=DEFAULT_MODES, help=f"comma list of {sorted(MODES)}, each +rerank too")
    p.add_argument("--langs", default="en,ru")
    p.add_argument("--limit", type=int, default=0, help="only the first N queries of each set (quick runs)")
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--score", nargs="*", default=None, help="only score these run files and print the table")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   help="config override section.key=value (JSON value), e.g. fuse.w_lex=1.5")


def _overrides(items: list[str]) -> dict:
    out: dict = {}
    for item in items:
        key, _, raw = item.partition("=")
        section, _, field = key.partition(".")
        if not field:
            raise ValueError(f"--set {item!r}: use section.key=value, e.g. fuse.k=60")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        out.setdefault(section, {})[field] = value
    return out


def mode_rows(queries: list[dict], fields: dict[str, dict], use: tuple[str, ...]) -> list[dict]:
    rows = []
    for q in queries:
        row = {"id": q["id"], "query": q["query"]}
        f = fields.get(q["id"], {})
        for name in use:
            if f.get(name):
                row[name] = f[name]
        rows.append(row)
    return rows


def ensure_index(corpus: Path, db: Path, lang: str, cfg: Config, runner) -> None:
    from pipelines.index import index_vault

    s = index_vault(corpus, db, f"bench-{lang}", cfg, runner, progress=True)
    log.info("index bench-%s: %s", lang, s.text())


def run_modes(args: argparse.Namespace, cfg: Config) -> tuple[pa.Table, list[dict]]:
    from faces.bench_data import corpus_dir, load_agent_fields, load_queries, read_agent_fields
    from faces.score_runs import per_query_metrics, write_run
    from fanout.runner import make_runner
    from pipelines.search import Searcher, SearchOptions

    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    queries = load_queries(args.bench) if not args.queries else [json.loads(x) for x in
                                                                   Path(args.queries).read_text().splitlines() if x]
    if args.fields:
        fields = {}
        for f in args.fields:
            lang = "ru" if f.rstrip(".json").endswith("ru") else "en"
            fields.update(read_agent_fields(f, lang))
    else:
        fields = load_agent_fields(args.bench)
    per_query, timings = [], []
    langs = args.langs.split(",")
    with make_runner(cfg, mode=cfg.runner.mode if cfg.runner.mode != "auto" else "inproc") as runner:
        for lang in langs:
            corpus = Path(args.corpus) / lang if args.corpus else corpus_dir(args.bench, lang)
            ensure_index(corpus, Path(args.db), lang, cfg, runner)
        for mode in args.modes.split(","):
            base, rerank = mode.split("+")[0], mode.endswith("+rerank")
            if base not in MODES:
                raise ValueError(f"--modes: unknown mode {base!r}; choose from {sorted(MODES)} (+rerank)")
            changes, use, expand = MODES[base]
            mcfg = cfg.replace(**changes) if changes else cfg
            for lang in langs:
                qs = [q for q in queries if q["lang"] == lang]
                if args.limit:
                    qs = [q for s in ("base", "tricky") for q in [x for x in qs if x["subset"] == s][:args.limit]]
                searcher = Searcher(args.db, f"bench-{lang}", mcfg, runner)
                t = time.perf_counter()
                res = searcher.search(mode_rows(qs, fields, use),
                                      SearchOptions(n=20, expand=expand, rerank=rerank))
                secs = time.perf_counter() - t
                run = {}
                for r in res.results.to_pylist():
                    run.setdefault(r["qid"], []).append(r["path"])
                write_run(out / "runs" / f"fanout-{mode}-{lang}.json", f"fanout-{mode}", run, lang=lang)
                pqm = per_query_metrics(run, qs, system=f"fanout-{mode}")
                per_query.append(pqm)
                timings.append({"mode": mode, "lang": lang, "queries": len(qs), "seconds": secs,
                                "per_query_ms": 1000 * secs / max(1, len(qs)),
                                **{f"t_{k}": v for k, v in res.timings.items()},
                                "stats": json.dumps(res.stats, default=str)})
                pq.write_table(res.variants.append_column("mode", pa.array([mode] * res.variants.num_rows)),
                               out / f"variants-{mode}-{lang}.parquet")
                pq.write_table(res.results.append_column("mode", pa.array([mode] * res.results.num_rows)),
                               out / f"results-{mode}-{lang}.parquet")
                log.info("%s %s: %d queries in %.1fs", mode, lang, len(qs), secs)
    table = pa.concat_tables(per_query, promote_options="default")
    pq.write_table(table, out / "per_query.parquet")
    pq.write_table(pa.Table.from_pylist(timings), out / "timings.parquet")
    return table, timings


def main_eval(args: argparse.Namespace) -> int:
    from faces.bootstrap_ci import set_intervals
    from faces.report_eval import (
        plot_sets,
        published_rows,
        render_markdown,
        score_runs_cli,
        with_intervals,
    )
    from faces.score_runs import summarize
    from fanout.config import load_config

    if args.score is not None:
        print(score_runs_cli(args.score, args.bench, n_boot=args.n_boot, include_published=False))
        return 0
    cfg = load_config(args.config)
    if args.overrides:
        cfg = cfg.replace(**_overrides(args.overrides))
    per_query, timings = run_modes(args, cfg)
    summary = summarize(per_query)
    rows = published_rows(args.bench) + with_intervals(summary, set_intervals(per_query, "ndcg_5", args.n_boot))
    for r in rows:
        r.setdefault("description", "fanout (this run)")
    out = Path(args.out)
    md = render_markdown(rows)
    cats = category_table(per_query)
    tim = "\n".join(f"| {t['mode']} | {t['lang']} | {t['queries']} | {t['per_query_ms']:.0f} |" for t in timings)
    report = (f"# fanout eval\n\nconfig: {args.config or 'local'} {args.overrides}\n\n## nDCG@5 (Recall@10)\n\n"
              f"{md}\n## per category (nDCG@5)\n\n{cats}\n## time\n\n| mode | lang | queries | ms/query |\n"
              f"|---|---|---|---|\n{tim}\n")
    report += paired_section(per_query, args.bench, args.n_boot)
    (out / "report.md").write_text(report, encoding="utf-8")
    plot_sets(rows, out / "ndcg5.png")
    print(report)
    print(f"wrote {out}/report.md, {out}/ndcg5.png, per_query.parquet, timings.parquet")
    return 0


PAIRS = (("fields", "fields-w1"), ("short", "fields-short"), ("hybrid", "trip2g-alias"), ("fields", "hybrid"))


def paired_section(per_query: pa.Table, bench: str | None, n_boot: int) -> str:
    """Paired bootstrap of nDCG@5 differences: our modes vs the closest published run (same queries)."""
    from faces.bench_data import load_published_runs, load_queries
    from faces.bootstrap_ci import paired_diff
    from faces.score_runs import per_query_metrics

    published = load_published_runs(bench)
    queries = load_queries(bench)
    ours = {s.removeprefix("fanout-"): per_query.filter(pa.compute.equal(per_query["system"], s))
            for s in set(per_query["system"].to_pylist())}
    lines = ["\n## paired bootstrap, nDCG@5 difference (95% interval)\n", "| ours - other | set | n | mean | interval |",
             "|---|---|---|---|---|"]
    for mine, other in PAIRS:
        if mine not in ours:
            continue
        if other in ours:
            b = ours[other]
        elif other in published:
            ids = set(ours[mine]["id"].to_pylist())
            b = per_query_metrics(published[other], [q for q in queries if q["id"] in ids], system=other)
        else:
            continue
        for name, d in paired_diff(ours[mine], b, "ndcg_5", n_boot).items():
            lines.append(f"| {mine} - {other} | {name} | {d['n']} | {d['mean_diff']:+.3f} | {d['interval']} |")
    return "\n".join(lines) + "\n"


def category_table(per_query: pa.Table) -> str:
    import duckdb

    t = per_query  # noqa: F841 - read by duckdb by name
    rows = duckdb.sql("select system, lang || ':' || category as cat, count(*) n, avg(ndcg_5) v from t "
                      "group by all order by cat, system").fetchall()
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


def main_analyze(args: argparse.Namespace) -> int:
    import duckdb

    d = Path(args.run_dir)
    con = duckdb.connect()
    for name, pattern in (("per_query", "per_query.parquet"), ("timings", "timings.parquet"),
                          ("results", "results-*.parquet"), ("variants", "variants-*.parquet")):
        if list(d.glob(pattern)):
            con.execute(f"create view {name} as select * from read_parquet('{d / pattern}', union_by_name=true)")
    sql = args.sql or ("select system, set, count(*) n, round(avg(ndcg_5), 3) ndcg5, round(avg(recall_10), 3) r10 "
                       "from per_query group by all order by set, ndcg5 desc")
    print(con.sql(sql))
    return 0
