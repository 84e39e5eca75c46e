"""`fanout eval`: run the search pipeline over judged queries in several modes and score it.

Two sources of judged queries:
- the Obsidian Help benchmark (default; `--bench DIR` or $FANOUT_BENCH): one index per language
  (`bench-<lang>` collections), the published runs and table next to ours, paired bootstrap against them;
- your own (`--queries FILE --vault DIR` or `--queries FILE -c COLLECTION`): any vault layout, one collection,
  the judged-queries format in EVAL_HELP, agent fields keyed by your query ids, sets = your `subset` values.

Modes are ablations (bm25, vector, hybrid, + local expansion, + each agent field alone, + all fields), each
optionally with rerank (`<mode>+rerank`). Per mode the run files, per-query metrics, timings, results and the
variants used are written under --out as parquet/JSON, then report.md (nDCG@5 with 95% bootstrap intervals,
Recall@10, per category, time) and ndcg5.png. duckdb SQL over those files: `fanout analyze OUT`.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fanout.errors import UserError
from fanout.evaluation.bench_data import AGENT_FIELDS

if TYPE_CHECKING:  # the CLI imports this module to build its parser: keep that free of pyarrow
    import pyarrow as pa

    from fanout.config import Config

log = logging.getLogger(__name__)

FIELDS = AGENT_FIELDS  # short_query, rephrased_query, expected_answer
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
OWN_MODES = "bm25,vector,hybrid"  # own data without --fields (the field modes need agent fields)
OWN_COLLECTION = "eval"  # collection `--vault` is indexed into when -c is not given

EVAL_HELP = """Score the pipeline on judged queries.

The Obsidian Help benchmark (default): fanout eval --out out/eval [--modes ...] [--limit N]
Only score run files:                  fanout eval --score runs/*.json
Your own vault and judged queries:     fanout eval --queries judged.jsonl --vault VAULT --out out/my-eval
                                       (or -c NAME for a collection already indexed in --db)

Judged queries (JSONL, one object a line; or a JSON list):
  {"id": "q1", "query": "how do I sync my phone", "relevant": ["Sync/Sync your notes.md"],
   "partial": ["Sync/Troubleshooting.md"], "subset": "base", "category": "paraphrase", "lang": "en"}
  id, query, relevant are required; partial, subset, category, lang are optional. Paths are relative to the
  vault root with "/" separators, exactly as `fanout ls` prints them (.md included); relevant counts 1.0,
  partial 0.5. Every subset is scored as its own set ("all" when none is given).
Agent fields (--fields FILE...): a JSON list of {"id", "short_query", "rephrased_query", "expected_answer"}
  or a map id -> fields, keyed by the same ids; they turn on the modes short, rephrased, expected, fields.
"""


def add_eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bench", default=None, help="Obsidian Help benchmark folder (default: $FANOUT_BENCH or "
                   "../shared/eval/obsidian-help)")
    p.add_argument("--queries", default=None, help="judged queries JSONL (default: the benchmark's); with "
                   "--vault or -c: your own, in the format above")
    p.add_argument("--vault", default=None, help="your own vault: index it (as -c, default 'eval') and score "
                   "--queries on it")
    p.add_argument("-c", "--collection", default=None, help="score --queries on this already indexed "
                   "collection of --db (with --vault: the collection to index into)")
    p.add_argument("--corpus", default=None, help="benchmark only: corpus root with en/ and ru/")
    p.add_argument("--db", default=None, help="index folder (default: .fanout/bench-db for the benchmark, "
                   "$FANOUT_DB or .fanout/db for your own)")
    p.add_argument("--fields", nargs="*", default=None, help="agent fields files (default: the benchmark's; "
                   "own data: keyed by your query ids)")
    p.add_argument("--out", default="out/eval", help="output folder")
    p.add_argument("--modes", default=None, help=f"comma list of {sorted(MODES)}, each +rerank too (default: "
                   f"{DEFAULT_MODES}; own data without --fields: {OWN_MODES})")
    p.add_argument("--langs", default="en,ru", help="benchmark only: languages to run")
    p.add_argument("--limit", type=int, default=0, help="only the first N queries of each set (quick runs)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples for the intervals")
    p.add_argument("--score", nargs="*", default=None, help="only score these run files and print the table")
    p.add_argument("--sections", type=int, default=0, metavar="N",
                   help="benchmark only: also search every query with --sections N, check the pages are the same, "
                        "and score the deep-section judgments (section@1 and section@N; fanout/evaluation/"
                        "sections_eval.py)")
    p.add_argument("--section-judgments", default=None, metavar="FILE",
                   help="the deep-section judgments (default: bench/data/deep_sections.jsonl)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   help="config override section.key=value (JSON value), e.g. fuse.w_lex=1.5")


def _overrides(items: list[str]) -> dict:
    out: dict = {}
    for item in items:
        key, _, raw = item.partition("=")
        section, _, field = key.partition(".")
        if not field:
            raise UserError(f"--set {item!r}: use section.key=value, e.g. fuse.k=60")
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


def ensure_index(corpus: Path, db: Path, name: str, cfg: Config, runner) -> None:
    from fanout.exec.progress import Progress
    from fanout.pipelines.index import index_vault

    with Progress(f"index {name}", "chunk") as progress:
        s = index_vault(corpus, db, name, cfg, runner, progress=progress)
    log.info("index %s: %s", name, s.text())


def _limit(qs: list[dict], limit: int) -> list[dict]:
    """The first `limit` queries of each set (all when limit is 0), in file order."""
    if not limit:
        return qs
    seen: dict[str, int] = {}
    out = []
    for q in qs:
        seen[q["set"]] = seen.get(q["set"], 0) + 1
        if seen[q["set"]] <= limit:
            out.append(q)
    return out


def _modes(spec: str) -> list[tuple[str, str, bool]]:
    out = []
    for mode in spec.split(","):
        base, rerank = mode.split("+")[0], mode.endswith("+rerank")
        if base not in MODES:
            raise UserError(f"--modes: unknown mode {base!r}; choose from {sorted(MODES)} (+rerank)")
        out.append((mode, base, rerank))
    return out


def run_one(searcher, qs: list[dict], fields: dict[str, dict], mode: str, base: str, rerank: bool,
            out: Path, tag: str, sections: dict | None = None) -> tuple[dict[str, list[str]], dict]:
    """One mode over one collection: the run {qid: [paths]}, and its timing row; writes results/variants.
    `sections` ({n, judgments, vault, rows, diffs, runs}): search again with sections=n and score them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fanout.pipelines.search import SearchOptions

    _, use, expand = MODES[base]
    t = time.perf_counter()
    res = searcher.search(mode_rows(qs, fields, use), SearchOptions(n=20, expand=expand, rerank=rerank))
    secs = time.perf_counter() - t
    run: dict[str, list[str]] = {}
    for r in res.results.to_pylist():
        run.setdefault(r["qid"], []).append(r["path"])
    for e in res.errors.to_pylist():
        log.warning("%s %s: query %s not searched: %s: %s", mode, tag, e["qid"], e["field"], e["error"])
    pq.write_table(res.variants.append_column("mode", pa.array([mode] * res.variants.num_rows)),
                   out / f"variants-{mode}-{tag}.parquet")
    pq.write_table(res.results.append_column("mode", pa.array([mode] * res.results.num_rows)),
                   out / f"results-{mode}-{tag}.parquet")
    log.info("%s %s: %d queries in %.1fs", mode, tag, len(qs), secs)
    timing = {"mode": mode, "lang": tag, "queries": len(qs), "seconds": secs,
              "per_query_ms": 1000 * secs / max(1, len(qs)), **{f"t_{k}": v for k, v in res.timings.items()},
              "stats": json.dumps(res.stats, default=str)}
    if sections:
        from fanout.evaluation.sections_eval import same_pages, score_sections

        t = time.perf_counter()
        res2 = searcher.search(mode_rows(qs, fields, use), SearchOptions(n=20, expand=expand, rerank=rerank,
                                                                          sections=sections["n"]))
        timing["sections_per_query_ms"] = 1000 * (time.perf_counter() - t) / max(1, len(qs))
        rows = res2.results.to_pylist()
        sections["diffs"][mode] = sections["diffs"].get(mode, 0) + same_pages(res.results.to_pylist(), rows)
        sections["rows"] += score_sections(rows, qs, sections["judgments"], sections["vault"], sections["n"], mode)
        run2: dict[str, list[str]] = {}
        for r in rows:
            run2.setdefault(r["qid"], []).append(r["path"])
        sections["runs"].append((f"{mode}+sections", run2))
    return run, timing


def run_modes(args: argparse.Namespace, cfg: Config) -> tuple[pa.Table, list[dict]]:
    """The Obsidian Help benchmark: one index per language, every mode."""

    from fanout.evaluation.bench_data import corpus_dir, load_agent_fields, load_queries, read_agent_fields
    from fanout.evaluation.score_runs import per_query_metrics, write_run
    from fanout.exec.runner_mode import make_runner
    from fanout.pipelines.search import Searcher

    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    db = Path(args.db or ".fanout/bench-db")
    if args.queries:
        queries = [json.loads(x) for x in Path(args.queries).read_text(encoding="utf-8").splitlines() if x]
        for q in queries:
            q.setdefault("set", f"{q['lang']}-{q['subset']}")
    else:
        queries = load_queries(args.bench)
    if args.fields:
        fields = {}
        for f in args.fields:
            lang = "ru" if f.removesuffix(".json").endswith("ru") else "en"
            fields.update(read_agent_fields(f, lang))
    else:
        fields = load_agent_fields(args.bench)
    per_query, timings = [], []
    langs = args.langs.split(",")
    modes = _modes(args.modes or DEFAULT_MODES)
    sec: dict | None = None
    if args.sections:
        from fanout.evaluation.sections_eval import load_judgments

        sec = {"n": args.sections, "judgments": load_judgments(args.section_judgments), "rows": [], "diffs": {}}
    with make_runner(cfg, mode=cfg.runner.mode if cfg.runner.mode != "auto" else "inproc") as runner:
        for lang in langs:
            corpus = Path(args.corpus) / lang if args.corpus else corpus_dir(args.bench, lang)
            ensure_index(corpus, db, f"bench-{lang}", cfg, runner)
        for mode, base, rerank in modes:
            changes = MODES[base][0]
            mcfg = cfg.replace(**changes) if changes else cfg
            for lang in langs:
                qs = _limit([q for q in queries if q["lang"] == lang], args.limit)
                searcher = Searcher(db, f"bench-{lang}", mcfg, runner)
                if sec is not None:
                    sec.update(runs=[], vault=Path(args.corpus) / lang if args.corpus else corpus_dir(args.bench, lang))
                run, timing = run_one(searcher, qs, fields, mode, base, rerank, out, lang, sec)
                write_run(out / "runs" / f"fanout-{mode}-{lang}.json", f"fanout-{mode}", run, lang=lang)
                per_query.append(per_query_metrics(run, qs, system=f"fanout-{mode}"))
                for name, run2 in (sec or {}).get("runs", []):  # the same pages, searched with sections
                    per_query.append(per_query_metrics(run2, qs, system=f"fanout-{name}"))
                timings.append(timing)
    if sec is not None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from fanout.evaluation.sections_eval import report

        if sec["rows"]:
            pq.write_table(pa.Table.from_pylist(sec["rows"]), out / "sections.parquet")
        (out / "sections.md").write_text(report(sec["rows"], sec["n"], sec["diffs"]), encoding="utf-8")
    return write_scores(out, per_query, timings)


# -- your own data ------------------------------------------------------------------------------------------


def run_own(args: argparse.Namespace, cfg: Config) -> tuple[pa.Table, list[dict]]:
    """Your own judged queries on your own vault (one collection; sets = the queries' subsets)."""

    from fanout.defaults import DEFAULT_DB
    from fanout.evaluation.own import check_judged, load_judged, load_own_fields
    from fanout.evaluation.score_runs import per_query_metrics
    from fanout.exec.runner_mode import make_runner
    from fanout.pipelines.search import Searcher
    from fanout.store.db import Collection

    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    db, name = Path(args.db or DEFAULT_DB), args.collection or OWN_COLLECTION
    queries = load_judged(args.queries)
    fields = load_own_fields(args.fields, {q["id"] for q in queries}) if args.fields else {}
    modes = _modes(args.modes or (DEFAULT_MODES if fields else OWN_MODES))
    for mode, base, _ in modes:
        if MODES[base][1] and not fields:
            raise UserError(f"--modes {mode} uses agent fields: give --fields FILE (keyed by your query ids) "
                            f"or leave the mode out (without fields: {OWN_MODES})")
    qs = _limit(queries, args.limit)
    per_query, timings = [], []
    with make_runner(cfg, mode=cfg.runner.mode if cfg.runner.mode != "auto" else "inproc") as runner:
        if args.vault:
            ensure_index(Path(args.vault), db, name, cfg, runner)
        col = Collection(str(db), name)
        col.require()
        check_judged(col, qs)
        for mode, base, rerank in modes:
            changes = MODES[base][0]
            searcher = Searcher(db, name, cfg.replace(**changes) if changes else cfg, runner)
            run, timing = run_one(searcher, qs, fields, mode, base, rerank, out, name)
            (out / "runs" / f"fanout-{mode}.json").write_text(
                json.dumps({"system": f"fanout-{mode}", "results": run}, ensure_ascii=False, indent=1), "utf-8")
            per_query.append(per_query_metrics(run, qs, system=f"fanout-{mode}"))
            timings.append(timing)
    return write_scores(out, per_query, timings)


def write_scores(out: Path, per_query: list, timings: list[dict]) -> tuple[pa.Table, list[dict]]:
    """per_query.parquet and timings.parquet of one eval run (benchmark or your own data)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables(per_query, promote_options="default")
    pq.write_table(table, out / "per_query.parquet")
    pq.write_table(pa.Table.from_pylist(timings), out / "timings.parquet")
    return table, timings


def main_eval(args: argparse.Namespace) -> int:
    from fanout.config import load_config
    from fanout.evaluation.bootstrap_ci import set_intervals
    from fanout.evaluation.report import (
        category_table,
        paired_section,
        plot_sets,
        published_rows,
        render_markdown,
        score_runs_cli,
        with_intervals,
    )
    from fanout.evaluation.score_runs import summarize

    if args.score is not None:
        print(score_runs_cli(args.score, args.bench, n_boot=args.n_boot, include_published=False))
        return 0
    own = args.vault is not None or args.collection is not None
    if args.sections < 0 or (own and args.sections):
        raise UserError(f"--sections {args.sections}: give a whole number >= 1, on the benchmark only (the "
                        "section judgments are the benchmark's)")
    if own and not args.queries:
        raise UserError("--vault / -c score your own judged queries: give them with --queries FILE "
                        "(format: `fanout eval --help`)")
    cfg = load_config(args.config)
    if args.overrides:
        cfg = cfg.replace(**_overrides(args.overrides))
    if args.sections:
        from fanout.api.requests import check_sections

        check_sections(args.sections, cfg.retrieve.max_sections)  # the cap every face applies
    per_query, timings = run_own(args, cfg) if own else run_modes(args, cfg)
    summary = summarize(per_query)
    rows = ([] if own else published_rows(args.bench)) + with_intervals(
        summary, set_intervals(per_query, "ndcg_5", args.n_boot))
    for r in rows:
        r.setdefault("description", "fanout (this run)")
    out = Path(args.out)
    md = render_markdown(rows)
    cats = category_table(per_query)
    tim = "\n".join(f"| {t['mode']} | {t['lang']} | {t['queries']} | {t['per_query_ms']:.0f} |"
                    + (f" {t['sections_per_query_ms']:.0f} |" if "sections_per_query_ms" in t else "")
                    for t in timings)
    secs_head = " ms/query with --sections (run second: query vectors cached) |" if any("sections_per_query_ms" in t for t in timings) else ""
    source = (f"queries {args.queries}, collection {args.collection or OWN_COLLECTION}"
              + (f", vault {args.vault}" if args.vault else "")) if own else "Obsidian Help benchmark"
    report = (f"# fanout eval\n\n{source}; config: {args.config or 'local'} {args.overrides}\n\n"
              f"## nDCG@5 (Recall@10)\n\n{md}\n## per category (nDCG@5)\n\n{cats}\n## time\n\n"
              f"| mode | {'collection' if own else 'lang'} | queries | ms/query |{secs_head}\n"
              f"|---|---|---|---|{'---|' * bool(secs_head)}\n{tim}\n")
    report += paired_section(per_query, args.bench, args.n_boot, with_published=not own)
    if (out / "sections.md").is_file() and getattr(args, "sections", None) and not own:
        report += "\n" + (out / "sections.md").read_text(encoding="utf-8")
    (out / "report.md").write_text(report, encoding="utf-8")
    plot_sets(rows, out / "ndcg5.png")
    print(report)
    print(f"wrote {out}/report.md, {out}/ndcg5.png, per_query.parquet, timings.parquet; "
          f"SQL over them: fanout analyze {out}")
    return 0
