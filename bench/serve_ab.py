"""Warm `fanout query` latency against two `fanout serve` builds at once, runs interleaved (A, B, A, B, ...), so
machine load hits both alike: for before/after numbers of a change to the server on a busy machine.

    .venv/bin/python -m bench.serve_ab --db DB --collection NAME --a CHECKOUT_A --b CHECKOUT_B
                                                    [--runs 15] [--modes query,search] [--config CFG]

DB is copied twice (the port file lives in the db folder, so each server needs its own copy); each checkout's
`fanout serve` runs on one copy. The client is this checkout's CLI for both (`python -m fanout.cli.main MODE QUERY`,
a fresh process per run, timed from spawn to exit, as bench/cli_latency.py does). Rows: "repeated" is the
identical command (answered from memory); "answered anew" changes only `-n` (the whole pipeline runs; the query
vector comes from its cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    ms = 1000 * (time.perf_counter() - t)
    if res.returncode != 0 or "fanout serve :" not in res.stderr:
        raise RuntimeError(f"{' '.join(cmd)} was not answered by a server ({res.returncode}): {res.stderr[-2000:]}")
    return ms


def in_process(args: argparse.Namespace, dbs: dict[str, str], rows: dict[str, list[float]]) -> None:
    from fanout.serve.client import ask_server

    def req(n: int) -> dict:
        return {"mode": "query", "collections": [args.collection], "query": args.query, "n": n}

    for name in ("A", "B"):
        ask_server(dbs[name], req(10), args.config)
    anew = 1000 - args.requests // 10  # n values no run has asked for
    for i in range(args.requests):
        for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
            for kind, n in (("repeated", 10), ("answered anew", anew + i // 10)) if i % 10 == 0 else \
                    (("repeated", 10),):
                t = time.perf_counter()
                resp = ask_server(dbs[name], req(n), args.config)
                ms = 1000 * (time.perf_counter() - t)
                if resp is None:
                    raise RuntimeError(f"server {name} did not answer")
                rows.setdefault(f"in-process request, {kind}, {name}", []).append(ms)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True)
    ap.add_argument("--collection", required=True)
    ap.add_argument("--a", required=True, help="checkout whose `fanout serve` is A (e.g. the base commit)")
    ap.add_argument("--b", required=True, help="checkout whose `fanout serve` is B (e.g. the change)")
    ap.add_argument("--query", default="how do I sync my notes between devices")
    ap.add_argument("--modes", default="query,search")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--config", default=None)
    ap.add_argument("--requests", type=int, default=300,
                    help="also: this many requests from this process to each server, alternating (fanout.serve.client."
                         "ask_server: the server's own latency, no process start); a tenth of them answered anew")
    args = ap.parse_args()
    cfg = ["--config", args.config] if args.config else []
    for checkout in {REPO, Path(args.a).resolve(), Path(args.b).resolve()}:  # as bench/cli_latency.py: with
        # PYTHONDONTWRITEBYTECODE set, a module edited since its last compile is compiled in every run (~10 ms)
        subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(checkout / d) for d in
                        ("faces", "fanout", "pipelines", "actors"))], check=True, capture_output=True)
    tmp = tempfile.TemporaryDirectory(prefix="fanout-ab-")
    servers, dbs = {}, {}
    try:
        for name, checkout in (("A", args.a), ("B", args.b)):
            db = Path(tmp.name) / name
            shutil.copytree(args.db, db, ignore=shutil.ignore_patterns(".fanout-serve.json*"))
            dbs[name] = str(db)
            env = {**os.environ, "PYTHONPATH": str(Path(checkout).resolve()), "LANCEDB_LOG": "error"}
            servers[name] = subprocess.Popen(
                [sys.executable, "-m", "fanout.cli.main", "serve", "--db", str(db), "-c", args.collection, *cfg],
                cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for name, proc in servers.items():
            deadline = time.monotonic() + 300
            while not (Path(dbs[name]) / ".fanout-serve.json").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server {name} did not start: {proc.stderr.read()[-2000:]}")
                time.sleep(0.2)
        env = {**os.environ, "PYTHONPATH": str(REPO), "LANCEDB_LOG": "error"}
        rows: dict[str, list[float]] = {}
        if args.requests:
            in_process(args, dbs, rows)
        for mode in args.modes.split(","):
            for name in ("A", "B"):
                base = [sys.executable, "-m", "fanout.cli.main", mode, args.query, "--db", dbs[name], "-c",
                        args.collection, *cfg, "--json", "-v"]
                timed(base, env)  # untimed: remembered from here on, query vector cached
            for i in range(args.runs):
                for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                    base = [sys.executable, "-m", "fanout.cli.main", mode, args.query, "--db", dbs[name], "-c",
                            args.collection, *cfg, "--json", "-v"]
                    rows.setdefault(f"{mode} repeated, {name}", []).append(timed(base, env))
                    rows.setdefault(f"{mode} answered anew, {name}", []).append(
                        timed(base + ["-n", str(11 + i)], env))
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(30)
        tmp.cleanup()
    print(f"A = {args.a}, B = {args.b}; {args.runs} runs each, interleaved; load avg {os.getloadavg()[0]:.1f}\n")
    print("| command | median ms | min ms | max ms |\n|---|---|---|---|")
    for name, xs in sorted(rows.items()):
        print(f"| {name} | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
