"""A query's cost outside the models: CPU of the whole process tree, per way of running a job; prints one table.

    .venv/bin/python -m bench.query_cost [--sizes 200,2000] [--modes inproc,data,floor,api]
                                                      [--scale-notes 0] [--cpus 2] [--baseline DIR]
                                                      [--also LABEL:SECTION.KEY=VALUE[,...]] [--repeat N]
                                                      [--dim 768] [--work DIR]

`--modes`: `inproc` (runner.mode inproc: the in-process loop), `data` (runner.mode ray: one Ray Data Dataset),
`floor` and `api` (below). Fake models (configs/fake.yaml: hashed bag-of-words vectors, at `--dim` dimensions, the real embedder's 768 by
default; no sleep), so only fanout's own work counts. The synthetic vault (`--scale-notes`) is written like a
real one (`Topics`: a Zipf vocabulary, one topic per 300 notes with words of its own), so its vectors cluster
by topic with neighbours inside it, as real embeddings do, and its queries are written with a topic's words:
they land next to that topic's chunks, and an ANN index's recall means what it would with the real model.
Each variant's table row also has the job's peak RSS (the in-process job's one process; on Ray Data the
driver's) and the recall@10 of its vector lists against exact search (`recall_child`: 300 query vectors of
the largest job, rows tied with the exact 10th counted as right). Each job is a
`fanout batch` of N distinct queries with an agent's three fields (short_query -> a second full-text list,
rephrased_query and expected_answer -> two more query vectors) run by `fanout.pipelines.batch.run_batch` in a child
process of its own cpuacct cgroup (v1): the CPU counted is that of every process the job starts, Ray's
raylet, GCS, workers and actors included. Every job starts from a fresh copy of the index (empty caches).

Per mode: CPU and wall of the 200- and the 2,000-query job; the marginal cost per query is the difference
divided by 1,800 (what a query adds), the fixed cost is what is left of the small job (process start,
imports, Ray start, actor pools, opening tables). Per stage: seconds inside each stage of the big job (the
in-process loop's own timer; on Ray Data each stage's own seconds, summed over its actors: RunStats). `--scale-notes N` repeats the jobs
on a synthetic vault of N notes (about 2 chunks each) to show the cost at a larger index. `--baseline DIR`
(a checkout of another commit, e.g. `git worktree add /tmp/base <commit>`) runs the same jobs on that code too,
in the same invocation, so before/after are compared on the same machine state. `--work DIR` keeps the vault
and the built index templates there for the next run (a 60,000-chunk index takes minutes to build). `--also` (repeatable) runs
this code again with config values changed (`--also blocks64:runner.block_rows=64`; with `--baseline`, that
code too, unless the label starts with `+`: config keys the baseline does not have): a tunable's candidates measured side by side. `--repeat N` runs every job N times, the variants taking turns, and reports the
medians (the progress lines show each median's range): the box's speed drifts by a second or two between
minutes, more than a change to the fixed cost often moves it. The mode `floor` runs Ray Data's own floor for the same job shape (the same private
Ray, blocks and actor pools, each stage an identity): what a Ray Data job costs before fanout does anything.
The mode `api` runs the same job through the Python API (`fanout.open(...).batch(...)`, in-process; this
code only): it must cost what `inproc` costs, the API adding nothing per query.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.synthetic_vault import queries, synthetic_vault, topic_queries

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LANCEDB_LOG", "error")
CGROUP = Path("/sys/fs/cgroup/cpuacct")
def median_run(runs: list[dict]) -> dict:
    """One size's runs of one variant as one: the median CPU and the median wall (each on its own)."""
    out = dict(runs[0])
    for key in ("cpu", "total_s", "start_s", "job_s"):
        out[key] = statistics.median(r[key] for r in runs)
    return out


def _spread(xs: list[float]) -> str:
    """`9.6` for one run, `9.6 (8.9-10.4)` for the median and range of several."""
    return f"{statistics.median(xs):.1f}" + (f" ({min(xs):.1f}-{max(xs):.1f})" if len(xs) > 1 else "")


def overrides(spec: str) -> tuple[str, dict]:
    """`LABEL:sec.key=val,sec.key=val` -> (LABEL, {sec: {key: val}}); values parsed as JSON when they are."""
    label, _, body = spec.partition(":")
    out: dict = {}
    for item in filter(None, body.split(",")):
        key, _, val = item.partition("=")
        sec, _, name = key.partition(".")
        try:
            v = json.loads(val)
        except ValueError:
            v = val
        out.setdefault(sec, {})[name] = v
    return label, out


def child_env(code: Path, sections: dict) -> dict:
    """The environment of a child job run as `python -m bench.<name>` in `code` (its cwd): `code`'s fanout first
    on the import path, this checkout's bench package after it (a --baseline checkout from before bench/ was a
    package has no bench of its own). A baseline in this layout (no fanout/__path__ extension) gets its
    fanout.actors and fanout.pipelines from this venv's editable install: compare those with its own venv."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)]), "FANOUT_QC_CODE": str(code),
            "FANOUT_QC_SET": json.dumps(sections)}


def in_cgroup(cmd: list[str], name: str, code: Path = ROOT, sections: dict | None = None) -> tuple[float, str]:
    """Run cmd in a fresh cpuacct cgroup with `code` first on the import path (child_env; Ray's workers inherit it);
    (CPU seconds of every process it started, its stdout)."""
    cg = CGROUP / name
    cg.mkdir()
    try:
        wrapped = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *cmd]
        env = child_env(code, sections or {})
        res = subprocess.run(wrapped, capture_output=True, text=True, check=False, timeout=3600, env=env,
                             cwd=code)
        if res.returncode:
            raise RuntimeError(f"{cmd} failed ({res.returncode}):\n{res.stderr[-3000:]}")
        deadline = time.monotonic() + 30  # Ray's processes exit after the driver: their CPU counts too
        while (cg / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu = int((cg / "cpuacct.usage").read_text()) / 1e9
        return cpu, res.stdout.strip().splitlines()[-1]
    finally:
        for _ in range(50):  # stragglers past the deadline are killed; the cgroup goes when it is empty
            procs = (cg / "cgroup.procs").read_text().split()
            for p in procs:
                subprocess.run(["kill", "-9", p], check=False)
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.2)


def job(mode: str, template: Path, n: int, work: Path, tag: str, cpus: int, code: Path = ROOT,
        sections: dict | None = None, notes: int = 0) -> dict:
    db = work / f"db-{tag}"
    shutil.rmtree(db, ignore_errors=True)
    shutil.copytree(template, db)
    q = work / f"q-{tag}.jsonl"
    qs = topic_queries(n, n, notes) if notes else queries(n, seed=n)
    q.write_text("".join(json.dumps(r) + "\n" for r in qs), encoding="utf-8")
    out = work / f"out-{tag}.parquet"
    cmd = [sys.executable, "-m", "bench.query_cost", "--child", mode, str(db), str(q), str(out), str(cpus)]
    cpu, line = in_cgroup(cmd, f"fanout-qc-{os.getpid()}-{tag}", code, sections)
    r = json.loads(line)
    assert r["errors"] == 0 and r["queries"] == n, r
    shutil.rmtree(db, ignore_errors=True)
    return {"mode": mode, "n": n, "cpu": cpu, **r}


def recall(template: Path, n: int, notes: int, code: Path, sections: dict) -> dict:
    """`recall_child` on the index `template` with `code` (no copy: it only reads)."""
    qf = template.parent / f"recall-{n}.jsonl"
    qs = topic_queries(n, n, notes) if notes else queries(n, seed=n)
    qf.write_text("".join(json.dumps(r) + "\n" for r in qs), encoding="utf-8")
    env = child_env(code, sections)
    res = subprocess.run([sys.executable, "-m", "bench.query_cost", "--recall-child", str(template), str(qf)], capture_output=True,
                         text=True, check=False, env=env, cwd=code, timeout=3600)
    if res.returncode:
        raise RuntimeError(f"recall failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def merged(a: dict, b: dict) -> dict:
    """Config sections `b` over `a` (one level deep: {section: {key: value}})."""
    return {**a, **{k: {**a.get(k, {}), **v} for k, v in b.items()}}


def build(vault: Path, db: Path, sections: dict | None = None) -> int:
    from fanout.pipelines.index import index_vault

    from fanout.config import load_config
    from fanout.exec.runner import Runner

    cfg = load_config("fake")
    if sections:
        cfg = cfg.replace(**sections)
    with Runner(cfg) as r:
        s = index_vault(vault, db, "bench", cfg, r)
    return s.chunks


def postings_files(db: Path, sections: dict) -> None:
    """The last step of `fanout index` (pipelines/query_files.py write_query_files) on a template kept from an earlier run
    (built by a version that wrote no postings files; a no-op when they are there): the jobs' copies then start
    with them, as after a real `fanout index`. Code without it (a baseline) ignores the files."""
    try:
        from fanout.pipelines.query_files import write_query_files
    except ImportError:
        return
    from fanout.config import load_config

    t = time.process_time()
    done = write_query_files(db, "bench", load_config("fake").replace(**sections))
    print(f"    postings files: {sorted(set(done.values()))} in {time.process_time() - t:.1f} CPU-s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="200,2000", help="two or more job sizes (queries); marginal = last vs first")
    ap.add_argument("--modes", default="inproc,data", help="ways to run the job: inproc, data, floor, api")
    ap.add_argument("--scale-notes", type=int, default=0, help="also on a synthetic vault of this many notes")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--baseline", default=None, help="a checkout of another commit: run its code too")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL:SEC.KEY=VAL[,...]",
                    help="run this code again with config values changed (repeatable)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every job this many times, the variants interleaved; medians are reported")
    ap.add_argument("--dim", type=int, default=768,
                    help="the fake embedder's dimension (fake.dim; the real embedder's is 768)")
    ap.add_argument("--work", default=None,
                    help="work folder, kept: the vault and index templates are reused by the next run")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--recall-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        from bench.query_cost_child import child

        child(*args.child[:4], int(args.child[4]))
        return 0
    if args.recall_child:
        from bench.query_cost_child import recall_child

        recall_child(*args.recall_child)
        return 0
    if not CGROUP.is_dir() or not os.access(CGROUP, os.W_OK):
        print(f"needs a writable cgroup v1 cpuacct hierarchy at {CGROUP} (root)", file=sys.stderr)
        return 2
    sizes = [int(x) for x in args.sizes.split(",")]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="fanout-qc-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    vaults = [("samples", ROOT / "samples" / "vault", 0)]
    if args.scale_notes:
        vdir = work / f"vault-{args.scale_notes}"
        if not vdir.is_dir():
            synthetic_vault(work / "vault-tmp", args.scale_notes).rename(vdir)
        vaults.append((f"synthetic {args.scale_notes} notes", vdir, args.scale_notes))
    dim = {"fake": {"dim": args.dim}}
    rows = []
    try:
        for label, vault, notes in vaults:
            template = work / f"template-{notes}-{args.dim}"
            t_build = time.perf_counter()
            if args.work and (template / "bench.manifest.json").is_file():  # kept from an earlier run
                chunks = json.loads((template / "bench.manifest.json").read_text())["stats"]["chunks"]
            else:
                shutil.rmtree(template, ignore_errors=True)
                chunks = build(vault, template, dim)
            print(f"  {label}: built {chunks} chunks in {time.perf_counter() - t_build:.0f} s", flush=True)
            postings_files(template, dim)
            codes = [("", ROOT, {})] + ([(" (baseline)", Path(args.baseline).resolve(), {})] if args.baseline else [])
            for tag, sections in map(overrides, args.also):  # each --also on this code, and on the baseline's
                codes += [(f" ({tag.lstrip('+')})", ROOT, sections)]  # (a label starting with + : this code only,
                codes += [(f" ({tag}, baseline)", Path(args.baseline).resolve(), sections)] \
                    if args.baseline and not tag.startswith("+") else []  # for keys the baseline has not)
            # the floor is Ray's and Ray Data's, not fanout's: on this code's runner, once per job shape (this
            # code's config and each --also), never for the baseline
            variants = [(c, e) for e in args.modes.split(",")
                        for c in ([c for c in codes if c[1] == ROOT] if e in ("floor", "api") else codes)]
            # --repeat N: every variant's job of one size N times, the variants taking turns (the box's speed
            # drifts between minutes; interleaved runs share it), then the median of each
            done: dict[tuple[int, int], list[dict]] = {}
            for _ in range(args.repeat):
                for n in sizes:
                    for v, ((mark, code, sections), mode) in enumerate(variants):
                        done.setdefault((v, n), []).append(
                            job(mode, template, n, work, f"{mode}-{n}-{len(rows)}-{v}", args.cpus, code,
                                merged(dim, sections), notes))
            recalls = [recall(template, sizes[-1], notes, c[1], merged(dim, c[2])) for c in codes]
            for v, ((mark, code, sections), mode) in enumerate(variants):
                runs = [median_run(done[(v, n)]) for n in sizes]
                small, big = runs[0], runs[-1]
                dn = big["n"] - small["n"]
                m_cpu = (big["cpu"] - small["cpu"]) / dn
                m_wall = (big["total_s"] - small["total_s"]) / dn
                rows.append({"index": f"{label} ({chunks} chunks)", "mode": mode + mark, "runs": runs,
                             "rss_mb": max(r.get("rss_mb") or 0 for r in runs),
                             "recall": None if mode == "floor" else
                             recalls[codes.index((mark, code, sections))]["recall"],
                             "spread": [done[(v, n)] for n in sizes],
                             "marginal_cpu_ms": 1000 * m_cpu, "marginal_wall_ms": 1000 * m_wall,
                             "fixed_cpu_s": small["cpu"] - small["n"] * m_cpu,
                             "fixed_wall_s": small["total_s"] - small["n"] * m_wall,
                             "stages": big["timings"], "n_big": big["n"]})
                print(f"  {label} {mode}{mark}: " + ", ".join(
                    f"{n} q cpu {_spread([r['cpu'] for r in done[(v, n)]])}s wall "
                    f"{_spread([r['total_s'] for r in done[(v, n)]])}s" for n in sizes), flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nfake models, queries with three agent fields, caches empty at the start; CPU of the whole process "
          f"tree (cpuacct cgroup); marginal = ({sizes[-1]} - {sizes[0]}) queries; {os.cpu_count()} cores"
          + (f"; medians of {args.repeat} interleaved runs" if args.repeat > 1 else "") + "\n")
    print("| index | mode | CPU ms/query (marginal) | wall ms/query (marginal) | fixed CPU s | fixed wall s | "
          + " | ".join(f"CPU s, {n} q" for n in sizes) + " | peak RSS MB | recall@10 vs exact |")
    print("|---|---|---|---|---|---|" + "---|" * len(sizes) + "---|---|")
    for r in rows:
        rec = "" if r["recall"] is None else f"{r['recall']:.3f}"
        print(f"| {r['index']} | {r['mode']} | {r['marginal_cpu_ms']:.2f} | {r['marginal_wall_ms']:.2f} | "
              f"{r['fixed_cpu_s']:.1f} | {r['fixed_wall_s']:.1f} | "
              + " | ".join(f"{x['cpu']:.1f}" for x in r["runs"]) + f" | {r['rss_mb']:.0f} | {rec} |")
    print("\nseconds per stage (in-process: the loop's timer; Ray Data: summed over the actors), marginal: "
          f"({sizes[-1]} - {sizes[0]}) queries' difference per query; in brackets the largest job's seconds per "
          "query, one-time costs (postings, title and alias maps, loading vectors) included:\n")
    for r in rows:
        small, big = r["runs"][0]["timings"], r["stages"]
        dn = r["n_big"] - r["runs"][0]["n"]
        st = ", ".join(f"{k} {1000 * (v - small.get(k, 0.0)) / dn:.2f} ({1000 * v / r['n_big']:.2f})"
                       for k, v in big.items())
        print(f"- {r['index']}, {r['mode']} (ms/query): {st}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
