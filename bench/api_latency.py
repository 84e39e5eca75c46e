"""A warm `kb.search` (the Python API) against `fanout serve` answering the same request anew, on one index.

    .venv/bin/python -m bench.api_latency [--db DIR --collection NAME] [--config fake] [--runs 15]

Without --db the bundled samples/vault is indexed into a temp folder first. `fanout serve` runs in its own
process on the db; the client is the one the CLI uses (`fanout.serve.client.ask_server`: discovery, token, one
HTTP call), timed in this process. Every request changes `n` (and so misses the server's answer memory): the
server runs the whole pipeline, as `kb.search` does. Both see the same caches (the query vector is cached
after the warm-up, as in bench/cli_latency.py's "answered anew"). Rows alternate API / server so load hits both
alike; medians and the ratio are printed in one table (issue 40's goal: the API within 10% of the server).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUERIES = ["how do I sync my notes between devices", "how long are backup snapshots kept",
           "which VLAN are the smart plugs on", "what goes in the packing list"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", default=None, help="an index folder (default: index samples/vault into a temp dir)")
    ap.add_argument("--collection", default="samples", help="collection in --db")
    ap.add_argument("--config", default="local", help="profile or YAML for both (default: local)")
    ap.add_argument("--runs", type=int, default=15, help="timed requests per side, per query")
    args = ap.parse_args()
    import fanout
    from fanout.serve.client import ask_server

    tmp = tempfile.mkdtemp(prefix="api-latency-")
    db = args.db or os.path.join(tmp, "db")
    kb = fanout.open(db, collection=args.collection, config=args.config)
    if args.db is None:
        kb.index(REPO / "samples" / "vault")
    env = {**os.environ, "PYTHONPATH": str(REPO), "LANCEDB_LOG": "error"}
    serve = subprocess.Popen([sys.executable, "-m", "fanout.cli.main", "serve", "--db", db, "-c", args.collection,
                              "--config", args.config], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        req = {"mode": "query", "collections": [args.collection], "query": QUERIES[0], "n": 10}
        t0 = time.time()
        while ask_server(db, req, args.config) is None:
            if serve.poll() is not None or time.time() - t0 > 300:
                raise RuntimeError(f"fanout serve did not start: {serve.stderr.read()[-2000:]}")
            time.sleep(0.5)
        api: list[float] = []
        srv: list[float] = []
        for q in QUERIES:  # warm-up: models loaded, query vectors cached on both sides
            kb.search(q, n=10)
            ask_server(db, {**req, "query": q, "n": 10}, args.config)
        n = 10
        for i in range(args.runs):
            for q in QUERIES:
                n = 11 + (n - 10) % 30  # a new n for every request: never the server's answer memory
                sides = [("api", lambda q=q, n=n: kb.search(q, n=n)),
                         ("serve", lambda q=q, n=n: ask_server(db, {**req, "query": q, "n": n}, args.config))]
                for name, call in sides if i % 2 == 0 else sides[::-1]:
                    t = time.perf_counter()
                    out = call()
                    ms = 1000 * (time.perf_counter() - t)
                    if out is None:
                        raise RuntimeError("fanout serve stopped answering")
                    (api if name == "api" else srv).append(ms)
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        kb.close()
    a, s = statistics.median(api), statistics.median(srv)
    print(f"| engine | requests | median ms | p90 ms |\n|---|---|---|---|\n"
          f"| kb.search (in this process) | {len(api)} | {a:.1f} | {statistics.quantiles(api, n=10)[-1]:.1f} |\n"
          f"| fanout serve, answered anew (HTTP from this process) | {len(srv)} | {s:.1f} | "
          f"{statistics.quantiles(srv, n=10)[-1]:.1f} |\n"
          f"| ratio kb.search / serve | | {a / s:.2f} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
