"""End-to-end latency of an interactive `fanout query` from the shell: cold (in-process) vs warm (`fanout serve`).

    .venv/bin/python -m bench.cli_latency [--db DIR --collection NAME] [--runs 7] [--query "..."]

Without --db the bundled samples/vault is indexed into a temp folder first. Each run is a fresh
`python -m fanout.cli.main <mode> QUERY` subprocess, timed from spawn to exit (what a user at a shell waits for):
  cold  --no-server: Python start, imports (lancedb, pyarrow), connect, embedder load, the search
  warm  the same command with `fanout serve` running on the db: Python start, a small import, one HTTP call
The query is repeated (so the query-vector cache is warm in every row: the difference is process start-up and
model load). Warm rows: "repeated" is the identical command (the server answers it from memory,
cache.serve_answers); "answered anew" changes only `-n`, so the server runs the whole pipeline (the query
vector still comes from its cache). Runs are interleaved cold/warm so machine load hits both alike. Also printed: the Python start-up
floor (`python -c pass`). Goal: warm well under 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_MS = 100.0


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    ms = 1000 * (time.perf_counter() - t)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-2000:]}")
    return ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=None, help="an index folder (default: index samples/vault into a temp dir)")
    ap.add_argument("--collection", default="samples", help="collection in --db")
    ap.add_argument("--query", default="how do I sync my notes between devices", help="the repeated query")
    ap.add_argument("--modes", default="query,search", help="CLI commands to time (query, search, vsearch)")
    ap.add_argument("--runs", type=int, default=7, help="timed runs per row (after one untimed warm-up)")
    ap.add_argument("--config", default=None, help="config for both (default: local)")
    ap.add_argument("--no-compile", action="store_true", help="do not write the project's bytecode first")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO), "LANCEDB_LOG": "error"}
    if not args.no_compile:  # as an installed package has it: with PYTHONDONTWRITEBYTECODE set (CI, sandboxes)
        # every run would compile faces/ and fanout/ from source again (~30 ms of the warm path)
        subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(REPO / d) for d in
                        ("faces", "fanout", "pipelines", "actors"))], check=True, capture_output=True)
    py = [sys.executable]
    cfg = ["--config", args.config] if args.config else []
    tmp = None
    db = args.db
    if db is None:
        tmp = tempfile.TemporaryDirectory(prefix="fanout-lat-")
        db = str(Path(tmp.name) / "db")
        subprocess.run([*py, "-m", "fanout.cli.main", "index", str(REPO / "samples" / "vault"), "--db", db, "-c",
                        args.collection, *cfg], cwd=REPO, env=env, check=True, capture_output=True)
    server = subprocess.Popen([*py, "-m", "fanout.cli.main", "serve", "--db", db, "-c", args.collection, *cfg],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port_file = Path(db) / ".fanout-serve.json"
        deadline = time.monotonic() + 300
        while not port_file.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fanout serve did not start: {server.stderr.read()[-2000:]}")
            time.sleep(0.2)
        floor = [timed([*py, "-c", "pass"], env) for _ in range(args.runs)]
        rows = [("python -c pass", floor)]
        for mode in args.modes.split(","):
            base = [*py, "-m", "fanout.cli.main", mode, args.query, "--db", db, "-c", args.collection, *cfg, "--json"]
            timed(base + ["--no-server"], env)  # untimed: fills the query-vector cache
            timed(base, env)
            cold, warm, anew = [], [], []
            for i in range(args.runs):
                cold.append(timed(base + ["--no-server"], env))
                warm.append(timed(base, env))
                anew.append(timed(base + ["-n", str(11 + i)], env))  # another request: the whole pipeline
            rows += [(f"{mode}, cold (in-process)", cold), (f"{mode}, warm (fanout serve), repeated", warm),
                     (f"{mode}, warm (fanout serve), answered anew", anew)]
    finally:
        server.terminate()
        server.wait(30)
        if tmp:
            tmp.cleanup()
    load = os.getloadavg()[0]
    print(f"`fanout <mode> \"{args.query}\"` end to end, {args.runs} runs each, interleaved; load avg {load:.1f}; "
          f"bytecode {'as found' if args.no_compile else 'compiled first'}\n")
    print("| command | median ms | min ms | max ms |\n|---|---|---|---|")
    for name, xs in rows:
        print(f"| {name} | {statistics.median(xs):.0f} | {min(xs):.0f} | {max(xs):.0f} |")
    warm_q = statistics.median(next(xs for n, xs in rows if n.endswith("warm (fanout serve), repeated")))
    print(f"\nwarm median {warm_q:.0f} ms: {'under' if warm_q < GOAL_MS else 'OVER'} the {GOAL_MS:.0f} ms goal")
    print(json.dumps({n: statistics.median(x) for n, x in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
