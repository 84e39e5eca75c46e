"""Driver peak RSS of `fanout batch` on the Ray Data engine against the input's length (fake models).

    .venv/bin/python -m bench.batch_rss [--rows 10000,100000,1000000] [--db DIR]

Each size runs in a fresh driver process (a private local Ray; fake profile, caches on, no sleep) that
generates nothing itself: the parent writes the JSONL input, the child runs `run_batch` and reports its own
peak RSS (ru_maxrss of the driver process only; Ray's workers are other processes), wall time and driver
CPU time. Flat means the driver never holds the input, the ids or the results (goal <= 1.5 GB at 1M rows).
`--phases-only` skips the search stages (every row is a bad row, answered by ParseQueries alone), which
measures what the driver itself does per row (staging, the todo pass, assembly) at sizes whose full search
would take hours on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["backup", "snapshot", "vlan", "router", "vpn", "media", "server", "power", "ups", "sourdough"]


def write_input(path: Path, n: int, bad: bool) -> None:
    with path.open("w") as f:
        for i in range(n):
            q = "" if bad else f"{WORDS[i % 10]} {WORDS[(i * 7) % 10]} question {i}"
            f.write(json.dumps({"id": f"q{i}", "query": q}) + "\n")


def child(args: argparse.Namespace) -> int:
    os.environ.setdefault("LANCEDB_LOG", "error")
    from fanout.pipelines.batch import run_batch
    from fanout.pipelines.search import Searcher, SearchOptions

    from fanout.config import load_config
    from fanout.exec.ray_runner import RayRunner
    from fanout.exec.runner import Runner

    cfg = load_config("fake").replace(runner={"object_store_mb": 256}, retriever={"count": 2, "num_cpus": 0.25},
                                      embedder={"num_cpus": 0.25})
    c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    with (RayRunner(cfg) if args.runner == "ray" else Runner(cfg)) as rr:
        st = run_batch(args.input, args.out, Searcher(args.db, "samples", cfg, rr), SearchOptions(n=5))
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"rows": st["queries"], "errors": st["errors"], "wall_s": time.perf_counter() - t0,
                      "driver_cpu_s": c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime,
                      "peak_rss_mb": c1.ru_maxrss / 1024}))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="10000,100000")
    ap.add_argument("--db", default=None, help="a fake-profile index of samples/vault (default: built here)")
    ap.add_argument("--phases-only", action="store_true")
    ap.add_argument("--runner", choices=["ray", "inproc"], default="ray",
                    help="ray: the Ray Data engine (driver = this process); inproc: the in-process loop")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    work = Path(tempfile.mkdtemp(prefix="fanout-rss-", dir="/tmp"))
    rows = []
    try:
        db = args.db
        if db is None:
            from fanout.pipelines.index import index_vault

            from fanout.config import load_config
            from fanout.exec.runner import Runner

            cfg = load_config("fake")
            db = str(work / "db")
            with Runner(cfg) as r:
                index_vault(ROOT / "samples" / "vault", db, "samples", cfg, r)
        for n in [int(x) for x in args.rows.split(",")]:
            inp = work / f"q{n}.jsonl"
            write_input(inp, n, args.phases_only)
            out = work / f"out{n}.parquet"
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            env.pop("RAY_ADDRESS", None)
            res = subprocess.run([sys.executable, __file__, "--child", "--input", str(inp), "--out", str(out),
                                  "--db", db, "--runner", args.runner], capture_output=True, text=True, env=env,
                                 check=False)
            if res.returncode != 0:
                print(res.stderr[-3000:])
                return 1
            r = json.loads(res.stdout.strip().splitlines()[-1])
            rows.append(r)
            print(f"  {n} rows: {r['wall_s']:.0f}s, peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
            inp.unlink()
            out.unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kind = "bad rows only (driver phases)" if args.phases_only else "fake-model search"
    engine = "Ray Data engine, private local Ray" if args.runner == "ray" else "in-process loop"
    print(f"\n{kind}; {engine} on {os.cpu_count()} cores\n")
    print("| input rows | wall s | rows/s | driver CPU s | driver CPU ms/row | driver peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['rows']} | {r['wall_s']:.0f} | {r['rows'] / r['wall_s']:.0f} | {r['driver_cpu_s']:.1f} | "
              f"{1000 * r['driver_cpu_s'] / r['rows']:.3f} | {r['peak_rss_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
