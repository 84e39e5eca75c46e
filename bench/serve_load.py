"""Many clients at once against a running `fanout serve` (loopback only, bounded count and time).

    .venv/bin/python -m bench.serve_load --db DB [--collection NAME] [--clients 1,20,300]
                                                      [--rounds 3] [--limit-s 90]

Reads the server's port file in DB (so it works against any checkout's server), asks once so the answer is
remembered, then for each count starts that many threads together behind a barrier; each sends the CLI's own
request (HTTP/1.0 POST /query, read until close) once. Prints per count: answers by status, failures (time-outs,
resets), and the latency of each client from its connect to the last byte: median, p95, max, plus the wall
time of the round. Every thread is joined within --limit-s.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from fanout.serve.client import port_path


def ask(port: int, body: bytes, timeout: float) -> tuple[int | None, float]:
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"POST /query HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        data = b""
        while block := s.recv(65536):
            data += block
    status = int(data.split(b" ", 2)[1]) if data else None
    return status, time.monotonic() - t


def round_of(port: int, body: bytes, clients: int, limit_s: float) -> tuple[list, float]:
    results: list = [None] * clients
    gate = threading.Barrier(clients)

    def one(i: int) -> None:
        try:
            gate.wait(timeout=limit_s)
            results[i] = ask(port, body, limit_s)
        except Exception as e:  # noqa: BLE001 - counted as a failure
            results[i] = type(e).__name__

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(clients)]
    t = time.monotonic()
    for th in threads:
        th.start()
    end = t + limit_s
    for th in threads:
        th.join(max(0.0, end - time.monotonic()))
    wall = time.monotonic() - t
    return [r if r is not None else "still waiting" for r in results], wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, help="the db a `fanout serve` runs on (its port file is read)")
    ap.add_argument("--collection", default="notes")
    ap.add_argument("--query", default="how do I sync my notes between devices")
    ap.add_argument("--clients", default="1,20,300", help="clients at once, one round per count")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per count")
    ap.add_argument("--limit-s", type=float, default=90.0, help="the longest a round may take")
    ap.add_argument("--sequential", type=int, default=0,
                    help="first, one client: this many repeated requests and this many answered anew (-n varies), "
                         "the server's own latency without a CLI process start")
    ap.add_argument("--mode", default="search", help="the request's mode (query, search, vsearch)")
    args = ap.parse_args()
    info = json.loads(Path(port_path(args.db)).read_text(encoding="utf-8"))

    def request(n: int) -> bytes:
        return json.dumps({"token": info["token"], "request": {"mode": args.mode, "collections": [args.collection],
                                                               "query": args.query, "n": n}}).encode()

    body = request(5)
    status, _ = ask(info["port"], body, args.limit_s)
    if status != 200:
        print(f"the first request got {status}", file=sys.stderr)
        return 1
    if args.sequential:
        print("| one client, sequential | requests | median | p95 | max |\n|---|---|---|---|---|")
        for name, bodies in (("repeated", [body] * args.sequential),
                             ("answered anew", [request(11 + i) for i in range(args.sequential)])):
            lat = sorted(ask(info["port"], b, args.limit_s)[1] * 1000 for b in bodies)
            print(f"| {name} | {len(lat)} | {statistics.median(lat):.2f} ms | "
                  f"{lat[min(len(lat) - 1, int(0.95 * len(lat)))]:.2f} ms | {lat[-1]:.2f} ms |", flush=True)
        print()
    print("| clients | answers by status | failed | median | p95 | max | wall |")
    print("|---|---|---|---|---|---|---|")
    for clients in (int(c) for c in args.clients.split(",")):
        for _ in range(args.rounds):
            results, wall = round_of(info["port"], body, clients, args.limit_s)
            ok = [r for r in results if isinstance(r, tuple)]
            statuses = Counter(r[0] for r in ok)
            failed = Counter(r for r in results if not isinstance(r, tuple))
            lat = sorted(r[1] * 1000 for r in ok) or [float("nan")]
            p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
            print(f"| {clients} | {dict(statuses)} | {dict(failed) or 0} | {statistics.median(lat):.0f} ms | "
                  f"{p95:.0f} ms | {lat[-1]:.0f} ms | {wall:.1f} s |", flush=True)
            time.sleep(1.0)  # let TIME_WAIT and the server settle between rounds
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
