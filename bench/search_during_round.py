"""Searches beside an index round in one process: p99 of `kb.search(mode="search")` idle and from a thread while a
round of `--round-notes` edited notes runs (`kb.index(vault)`, fake models), per variant of what might shorten
the wait, interleaved in one process so the box's load hits each alike.

    nice .venv/bin/python -m bench.search_during_round --notes 5000 --embed-sleep-s 0,0.002 --switch-ms 5,1,0.5

A round's Python and a search's take turns on the GIL: a thread that wants it back waits up to
`sys.getswitchinterval()` each time another holds it (a search gives it up at each call into Lance, Arrow or
numpy that releases it). `--switch-ms`: that interval while the round runs (`sys.setswitchinterval`; 5 ms is
Python's default); `--embed-sleep-s`: the fake embedder sleeps that a text (releasing the GIL, as llama.cpp
does), 0 keeps it pure Python. Reports each variant's search p99 and the round's own wall and CPU seconds. The
vault and index are kept under --work (bench/watch_idle.py's; an index there is resumed).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from bench.synthetic_vault import synthetic_vault, topic_queries

os.environ.setdefault("LANCEDB_LOG", "error")


def searches_beside_a_round(kb, vault: Path, queries: list[str]) -> tuple[list[float], list[float], dict]:
    """`kb.index(vault)` in a thread, searches in this one until it ends: their wall and CPU seconds, and the
    round's wall seconds, its thread's CPU seconds and the process's (every thread but the searching one)."""
    done, span = threading.Event(), {}

    def round_() -> None:
        t, c = time.perf_counter(), time.thread_time()
        kb.index(vault)
        span["wall"], span["round_cpu"] = time.perf_counter() - t, time.thread_time() - c
        done.set()

    th = threading.Thread(target=round_)
    p0 = time.process_time()
    th.start()
    during, during_cpu = [], []
    i = 0
    while not done.is_set():
        t, c = time.perf_counter(), time.thread_time()
        kb.search(queries[i % len(queries)], mode="search")
        if not done.is_set() or not during:
            during.append(time.perf_counter() - t)
            during_cpu.append(time.thread_time() - c)
        i += 1
    th.join()
    span["process_cpu"] = time.process_time() - p0 - sum(during_cpu)  # every thread's but the searches'
    return during, during_cpu, span


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--notes", type=int, default=5000)
    ap.add_argument("--round-notes", type=int, default=50)
    ap.add_argument("--embed-sleep-s", default="0,0.002", help="comma-separated")
    ap.add_argument("--switch-ms", default="5,1,0.5", help="comma-separated; the round's switch interval")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--searches", type=int, default=200, help="idle searches per variant")
    ap.add_argument("--work", type=Path, default=Path("/tmp/watch-idle"))
    args = ap.parse_args(argv)

    import fanout
    from fanout.config import load_config

    vault, db = args.work / f"vault-{args.notes}", args.work / f"db-{args.notes}"
    if not vault.exists():
        synthetic_vault(args.work / "vault-tmp", args.notes).rename(vault)
    notes = sorted(vault.rglob("*.md"))
    queries = [q["short_query"] for q in topic_queries(args.searches, 5, args.notes)]
    base = sys.getswitchinterval()
    rows: dict[tuple[float, float], list[dict]] = {}
    n = 0
    for _, sleep_s, switch_ms in itertools.product(range(args.repeat), map(float, args.embed_sleep_s.split(",")),
                                                   map(float, args.switch_ms.split(","))):
        cfg = load_config("fake").replace(fake={"embed_sleep_s": sleep_s})
        with fanout.open(db, config=cfg) as kb:
            kb.index(vault)
            kb.search(queries[0], mode="search")
            idle, idle_cpu = [], []
            for q in queries:
                t, c = time.perf_counter(), time.thread_time()
                kb.search(q, mode="search")
                idle.append(time.perf_counter() - t)
                idle_cpu.append(time.thread_time() - c)
            for _ in range(args.round_notes):
                n += 1
                with open(notes[(n * 104729 + 13) % len(notes)], "a", encoding="utf-8") as f:
                    f.write(f"\n\nEdited by the benchmark: {n}.\n")
            sys.setswitchinterval(switch_ms / 1e3)
            try:
                during, during_cpu, span = searches_beside_a_round(kb, vault, queries)
            finally:
                sys.setswitchinterval(base)
        row = {f"{k}{q}": pct(xs, q / 100) * 1e3 for k, xs in (("idle", idle), ("during", during)) for q in (50, 90, 99)}
        rows.setdefault((sleep_s, switch_ms), []).append(
            {**row, "n": len(during), **span, "cpu": statistics.median(idle_cpu) * 1e3,
             "cpu_d": statistics.median(during_cpu) * 1e3})
    print(f"\n{args.notes} notes, a {args.round_notes}-note round, {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}; medians over {args.repeat} interleaved runs (ratio: during / idle, per run)\n")
    print("| embed sleep s/text | round's switch interval ms | search p99 idle / during ms | ratio p50 / p90 / p99 | "
          "search CPU ms idle / during | searches during | round wall s | round CPU s: its thread / all threads |\n"
          "|---|---|---|---|---|---|---|---|")
    for (sleep_s, switch_ms), rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        ratios = " / ".join(f"{statistics.median(r[f'during{q}'] / r[f'idle{q}'] for r in rs):.1f}x" for q in (50, 90, 99))
        print(f"| {sleep_s:g} | {switch_ms:g} | {med['idle99']:.1f} / {med['during99']:.1f} | {ratios} | "
              f"{med['cpu']:.1f} / {med['cpu_d']:.1f} | {med['n']:.0f} | {med['wall']:.2f} | {med['round_cpu']:.2f} / {med['process_cpu']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
