"""A query's cost outside the models: CPU of the whole process tree, both engines; prints one table.

    PYTHONPATH=. .venv/bin/python bench/query_cost.py [--sizes 200,2000] [--engines inproc,data,floor]
                                                      [--scale-notes 0] [--cpus 2] [--baseline DIR]
                                                      [--also LABEL:SECTION.KEY=VALUE[,...]] [--repeat N]

Fake models (configs/fake.yaml: hashed vectors, no sleep), so only fanout's own work counts. Each job is a
`fanout batch` of N distinct queries with an agent's three fields (short_query -> a second full-text list,
rephrased_query and expected_answer -> two more query vectors) run by `fanout.pipelines.batch.run_batch` in a child
process of its own cpuacct cgroup (v1): the CPU counted is that of every process the job starts, Ray's
raylet, GCS, workers and actors included. Every job starts from a fresh copy of the index (empty caches).

Per engine: CPU and wall of the 200- and the 2,000-query job; the marginal cost per query is the difference
divided by 1,800 (what a query adds), the fixed cost is what is left of the small job (process start,
imports, Ray start, actor pools, opening tables). Per stage: seconds inside each stage of the big job (the
in-process loop's own timer; on Ray Data each stage's own seconds, summed over its actors: RunStats). `--scale-notes N` repeats the jobs
on a synthetic vault of N notes (about 2 chunks each) to show the cost at a larger index. `--baseline DIR`
(a checkout of another commit, e.g. `git worktree add /tmp/base <commit>`) runs the same jobs on that code too,
in the same invocation, so before/after are compared on the same machine state. `--also` (repeatable) runs
this code again with config values changed (`--also blocks64:runner.block_rows=64`; with `--baseline`, that
code too): a tunable's candidates measured side by side. `--repeat N` runs every job N times, the variants taking turns, and reports the
medians (the progress lines show each median's range): the box's speed drifts by a second or two between
minutes, more than a change to the fixed cost often moves it. The engine `floor` runs Ray Data's own floor for the same job shape (the same private
Ray, blocks and actor pools, each stage an identity): what a Ray Data job costs before fanout does anything.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("FANOUT_QC_CODE") or str(ROOT))  # the code a child job runs
os.environ.setdefault("LANCEDB_LOG", "error")
CGROUP = Path("/sys/fs/cgroup/cpuacct")
WORDS = ["backup", "snapshot", "vlan", "router", "vpn", "media", "server", "power", "ups", "sourdough", "dal",
         "train", "lisbon", "packing", "glossary", "meeting", "borscht", "kvass", "baikal", "kazan", "restic",
         "zfs", "mirror", "disk", "pantry", "plug", "camera", "garden", "tomato", "ferment"]


def queries(n: int, seed: int) -> list[dict]:
    """n distinct queries with the three agent fields (each text unique: no cache or dedupe helps)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        a, b, c = rnd.sample(WORDS, 3)
        out.append({"id": f"q{seed}-{i}", "query": f"how do I set up {a} {b} ({i})",
                    "short_query": f"{a} {c} {i}",
                    "rephrased_query": f"{b} {c} configuration steps {seed}-{i}",
                    "expected_answer": f"The {a} notes explain the {c} setup and the {b} schedule ({seed}-{i})."})
    return out


def synthetic_vault(root: Path, notes: int, seed: int = 1) -> Path:
    """`notes` markdown notes of two sections each, words drawn from WORDS plus filler (about 2 chunks each)."""
    rnd = random.Random(seed)
    for i in range(notes):
        d = root / f"area{i % 20}"
        d.mkdir(parents=True, exist_ok=True)
        body = []
        for h in range(2):
            words = " ".join(rnd.choice(WORDS) for _ in range(120))
            body.append(f"## Part {h} {rnd.choice(WORDS)}\n\n{words}.\n")
        (d / f"note {i}.md").write_text(f"# Note {i}\n\n" + "\n".join(body), encoding="utf-8")
    return root


# -- the child: one job, in its own cgroup --------------------------------------------------------------------
def child(engine: str, db: str, qfile: str, out: str, cpus: int) -> None:
    t0 = time.perf_counter()
    from fanout.config import load_config
    try:
        from fanout.exec.engines import make_runner
    except ImportError:  # a --baseline checkout from before fanout/exec/engines.py
        from fanout.exec.runner import make_runner
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import Searcher, SearchOptions

    cfg = load_config("fake")
    sections: dict = json.loads(os.environ.get("FANOUT_QC_SET") or "{}")  # --also: config values changed
    if engine == "floor":  # the same shape: `--also` changes (pool counts, CPUs) apply to it too
        return floor(cfg.replace(**sections) if sections else cfg, db, qfile, t0)
    if engine == "data":
        sections["runner"] = {**sections.get("runner", {}), "mode": "ray"}
    if sections:
        cfg = cfg.replace(**sections)
    with make_runner(cfg, mode="ray" if engine == "data" else "inproc") as runner:
        t1 = time.perf_counter()
        searcher = Searcher(db, "bench", cfg, runner)
        st = run_batch(qfile, out, searcher, SearchOptions(n=10, expand=False, rerank=False))
        t2 = time.perf_counter()
    print(json.dumps({"start_s": t1 - t0, "job_s": t2 - t1, "total_s": time.perf_counter() - t0,
                      "queries": st["queries"], "errors": st["errors"], "timings": st["timings"]}))


class Identity:
    def __call__(self, table):
        return table


def floor(cfg, db: str, qfile: str, t0: float) -> None:
    """Ray Data's own floor for the job's shape: the same private local Ray (fanout's runner), the job's rows
    as the same blocks, and one identity actor pool per pool the search would run (same count and CPUs),
    iterated to the end. What a Ray Data job costs before fanout does anything."""
    import pyarrow as pa
    from fanout.pipelines.search import SearchOptions, search_stages

    from fanout.exec.engines import make_runner
    from fanout.exec.ray_data import pool_sizes, read_blocks
    from fanout.exec.runner import fuse_specs

    n = sum(1 for line in Path(qfile).read_text(encoding="utf-8").splitlines() if line.strip())
    cfg = cfg.replace(runner={"mode": "ray"})
    specs = fuse_specs(search_stages(cfg, db, "bench", SearchOptions(n=10, expand=False, rerank=False)))
    blocks = read_blocks(cfg, specs, n, 1)
    per = -(-n // blocks)
    with make_runner(cfg, mode="ray") as runner:
        t1 = time.perf_counter()
        rd = runner.ray_data()
        ctx = rd.DataContext.get_current()
        ctx.enable_progress_bars, ctx.wait_for_min_actors_s = False, -1
        ds = rd.from_blocks([pa.table({"_row": list(range(i, min(i + per, n)))}) for i in range(0, n, per)])
        sizes = pool_sizes(cfg, specs, [0] * len(specs), n, per)
        for k, (spec, size) in enumerate(zip(specs, sizes, strict=True)):
            acfg = getattr(cfg, spec.pool)
            ds = ds.map_batches(type(f"Identity{k}", (Identity,), {}), batch_format="pyarrow",
                                batch_size=spec.batch_rows or acfg.batch_size, num_cpus=acfg.num_cpus,
                                compute=rd.ActorPoolStrategy(size=size))
        rows = sum(t.num_rows for t in ds.iter_batches(batch_format="pyarrow", batch_size=None))
        t2 = time.perf_counter()
    print(json.dumps({"start_s": t1 - t0, "job_s": t2 - t1, "total_s": time.perf_counter() - t0,
                      "queries": rows, "errors": 0, "timings": {}}))


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


def in_cgroup(cmd: list[str], name: str, code: Path = ROOT, sections: dict | None = None) -> tuple[float, str]:
    """Run cmd in a fresh cpuacct cgroup with `code` first on the import path (Ray's workers inherit it);
    (CPU seconds of every process it started, its stdout)."""
    cg = CGROUP / name
    cg.mkdir()
    try:
        wrapped = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *cmd]
        env = {**os.environ, "PYTHONPATH": str(code), "FANOUT_QC_CODE": str(code),
               "FANOUT_QC_SET": json.dumps(sections or {})}
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


def job(engine: str, template: Path, n: int, work: Path, tag: str, cpus: int, code: Path = ROOT,
        sections: dict | None = None) -> dict:
    db = work / f"db-{tag}"
    shutil.rmtree(db, ignore_errors=True)
    shutil.copytree(template, db)
    q = work / f"q-{tag}.jsonl"
    q.write_text("".join(json.dumps(r) + "\n" for r in queries(n, seed=n)), encoding="utf-8")
    out = work / f"out-{tag}.parquet"
    cmd = [sys.executable, __file__, "--child", engine, str(db), str(q), str(out), str(cpus)]
    cpu, line = in_cgroup(cmd, f"fanout-qc-{os.getpid()}-{tag}", code, sections)
    r = json.loads(line)
    assert r["errors"] == 0 and r["queries"] == n, r
    shutil.rmtree(db, ignore_errors=True)
    return {"engine": engine, "n": n, "cpu": cpu, **r}


def build(vault: Path, db: Path) -> int:
    from fanout.pipelines.index import index_vault

    from fanout.config import load_config
    from fanout.exec.runner import Runner

    cfg = load_config("fake")
    with Runner(cfg) as r:
        s = index_vault(vault, db, "bench", cfg, r)
    return s.chunks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="200,2000", help="two or more job sizes (queries); marginal = last vs first")
    ap.add_argument("--engines", default="inproc,data")
    ap.add_argument("--scale-notes", type=int, default=0, help="also on a synthetic vault of this many notes")
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--baseline", default=None, help="a checkout of another commit: run its code too")
    ap.add_argument("--also", action="append", default=[], metavar="LABEL:SEC.KEY=VAL[,...]",
                    help="run this code again with config values changed (repeatable)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every job this many times, the variants interleaved; medians are reported")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child[:4], int(args.child[4]))
        return 0
    if not CGROUP.is_dir() or not os.access(CGROUP, os.W_OK):
        print(f"needs a writable cgroup v1 cpuacct hierarchy at {CGROUP} (root)", file=sys.stderr)
        return 2
    sizes = [int(x) for x in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="fanout-qc-", dir="/tmp"))
    vaults = [("samples", ROOT / "samples" / "vault")]
    if args.scale_notes:
        vaults.append((f"synthetic {args.scale_notes} notes", synthetic_vault(work / "vault", args.scale_notes)))
    rows = []
    try:
        for label, vault in vaults:
            template = work / f"template-{len(rows)}"
            chunks = build(vault, template)
            codes = [("", ROOT, {})] + ([(" (baseline)", Path(args.baseline).resolve(), {})] if args.baseline else [])
            for tag, sections in map(overrides, args.also):  # each --also on this code, and on the baseline's
                codes += [(f" ({tag})", ROOT, sections)]
                codes += [(f" ({tag}, baseline)", Path(args.baseline).resolve(), sections)] if args.baseline else []
            # the floor is Ray's and Ray Data's, not fanout's: on this code's runner, once per job shape (this
            # code's config and each --also), never for the baseline
            variants = [(c, e) for e in args.engines.split(",")
                        for c in ([c for c in codes if c[1] == ROOT] if e == "floor" else codes)]
            # --repeat N: every variant's job of one size N times, the variants taking turns (the box's speed
            # drifts between minutes; interleaved runs share it), then the median of each
            done: dict[tuple[int, int], list[dict]] = {}
            for _ in range(args.repeat):
                for n in sizes:
                    for v, ((mark, code, sections), engine) in enumerate(variants):
                        done.setdefault((v, n), []).append(
                            job(engine, template, n, work, f"{engine}-{n}-{len(rows)}-{v}", args.cpus, code, sections))
            for v, ((mark, code, sections), engine) in enumerate(variants):
                runs = [median_run(done[(v, n)]) for n in sizes]
                small, big = runs[0], runs[-1]
                dn = big["n"] - small["n"]
                m_cpu = (big["cpu"] - small["cpu"]) / dn
                m_wall = (big["total_s"] - small["total_s"]) / dn
                rows.append({"index": f"{label} ({chunks} chunks)", "engine": engine + mark, "runs": runs,
                             "spread": [done[(v, n)] for n in sizes],
                             "marginal_cpu_ms": 1000 * m_cpu, "marginal_wall_ms": 1000 * m_wall,
                             "fixed_cpu_s": small["cpu"] - small["n"] * m_cpu,
                             "fixed_wall_s": small["total_s"] - small["n"] * m_wall,
                             "stages": big["timings"], "n_big": big["n"]})
                print(f"  {label} {engine}{mark}: " + ", ".join(
                    f"{n} q cpu {_spread([r['cpu'] for r in done[(v, n)]])}s wall "
                    f"{_spread([r['total_s'] for r in done[(v, n)]])}s" for n in sizes), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nfake models, queries with three agent fields, caches empty at the start; CPU of the whole process "
          f"tree (cpuacct cgroup); marginal = ({sizes[-1]} - {sizes[0]}) queries; {os.cpu_count()} cores"
          + (f"; medians of {args.repeat} interleaved runs" if args.repeat > 1 else "") + "\n")
    print("| index | engine | CPU ms/query (marginal) | wall ms/query (marginal) | fixed CPU s | fixed wall s | "
          + " | ".join(f"CPU s, {n} q" for n in sizes) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(sizes))
    for r in rows:
        print(f"| {r['index']} | {r['engine']} | {r['marginal_cpu_ms']:.2f} | {r['marginal_wall_ms']:.2f} | "
              f"{r['fixed_cpu_s']:.1f} | {r['fixed_wall_s']:.1f} | "
              + " | ".join(f"{x['cpu']:.1f}" for x in r["runs"]) + " |")
    print("\nseconds per stage in the largest job (in-process: the loop's timer; Ray Data: summed over the actors):\n")
    for r in rows:
        st = ", ".join(f"{k} {1000 * v / r['n_big']:.2f}" for k, v in r["stages"].items())
        print(f"- {r['index']}, {r['engine']} (ms/query): {st}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
