"""Searches beside an index round in one process: p50/p90/p99 of `kb.search(mode="search")` (`--face kb`) or of the
server's request path (`--face serve`: `fanout serve`'s App answering one JSON request, less the HTTP) idle and
from a thread while a round of `--round-notes` edited notes runs (`kb.index(vault)`, fake models), this checkout
against a baseline checkout (`--baseline-root`, with its own venv's interpreter) in the same run, interleaved.

    nice .venv/bin/python -m bench.search_during_round --notes 5000 --repeat 5 --face kb,serve \\
        --baseline-root ../main --baseline-python ../main/.venv/bin/python

Each measurement is a fresh process (a child): it indexes the vault (resuming the index under --work), takes
`--searches` idle searches, edits `--round-notes` notes, and searches from its main thread while the round runs in
another until the round's version is what its searches serve (`kb.wait_ready` where the checkout has it; else
until its query-file jobs are done); every search that started before then counts. `--embed-sleep-s`: the fake embedder sleeps that a text (releasing the GIL, as llama.cpp does), 0
keeps it pure Python; `--switch-ms`: `sys.setswitchinterval` while the round runs (5 ms is Python's default);
`--round-in process`: the round in a fresh process of its own instead of a thread beside the searches (no GIL
shared; the window: until it ends and one search more, the first of its version); `--round-in worker`: what a
watcher does (`watch.rounds_in`): the round in a kept, warmed worker process (fanout/api/round_worker.py) and its
version swapped in by this one (the window: until it is served).
Reports per variant the medians over the runs of the p99s and of the ratios during / idle, the searches' and the
round's wall and CPU seconds. The vault and index are kept under --work (an index there is resumed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("LANCEDB_LOG", "error")
ROOT = Path(__file__).resolve().parents[1]


# `--round-in process`: the round in a process of its own (the same fake models), as a watcher could run it
ROUND = ("import os, sys; os.environ.setdefault('LANCEDB_LOG', 'error'); import fanout; "
         "from fanout.config import load_config; "
         "cfg = load_config('fake').replace(fake={'embed_sleep_s': float(sys.argv[3])}); "
         "kb = fanout.open(sys.argv[1], config=cfg); kb.index(sys.argv[2]); kb.close()")


def searches_beside_a_round(kb, vault: Path, ask, round_in: str = "thread", sleep_s: float = 0.0, worker=None
                            ) -> tuple[list[float], list[float], dict]:
    """`kb.index(vault)` in a thread, `ask(i)` in this one until the round's version is served: the searches'
    wall and CPU seconds, and the round's wall seconds, its thread's CPU seconds and the process's (every
    thread but the searching one). `round_in` "process": the round in a child process, until it ends and one
    search more (the first of its version, which this process then opens); its CPU is the child's."""
    done, span = threading.Event(), {}

    def round_() -> None:
        t, c = time.perf_counter(), time.thread_time()
        if round_in == "process":
            import resource

            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([sys.executable, "-c", ROUND, str(kb.db), str(vault), str(sleep_s)], check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            span["wall"] = span["ready"] = time.perf_counter() - t
            span["round_cpu"] = span["child_cpu"] = cpu
            done.set()
            return
        if worker is not None:  # the watcher's path: the round in its worker process, swapped in here
            from bench.child_process import proc_cpu_s

            stat = f"/proc/{worker.pid}/stat"
            w0 = proc_cpu_s(stat)
            kb.index_in(worker, vault)
            span["wall"], span["round_cpu"] = time.perf_counter() - t, proc_cpu_s(stat) - w0
            span["child_cpu"] = span["round_cpu"]
        else:
            kb.index(vault)
            span["wall"], span["round_cpu"] = time.perf_counter() - t, time.thread_time() - c
        if hasattr(kb, "wait_ready"):  # until its version is what searches serve
            kb.wait_ready()
        else:  # (a checkout without it: until the version's query-file jobs are done)
            from fanout.store import version_files
            version_files.wait()
        span["ready"] = time.perf_counter() - t
        done.set()

    th = threading.Thread(target=round_)
    p0 = time.process_time()
    th.start()
    during, during_cpu = [], []
    i = 0
    while not done.is_set():  # every search that started before the round's version was served
        t, c = time.perf_counter(), time.thread_time()
        ask(i)
        during.append(time.perf_counter() - t)
        during_cpu.append(time.thread_time() - c)
        i += 1
    if round_in == "process":  # the first search of its version: this process opens it then
        t, c = time.perf_counter(), time.thread_time()
        ask(i)
        during.append(time.perf_counter() - t)
        during_cpu.append(time.thread_time() - c)
    th.join()
    span["process_cpu"] = time.process_time() - p0 - sum(during_cpu) + span.get("child_cpu", 0.0)
    return during, during_cpu, span


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def child(args: argparse.Namespace) -> dict:
    """One measurement in this process (its checkout's fanout): a JSON-able row."""
    import fanout
    from bench.synthetic_vault import topic_queries
    from fanout.config import load_config

    vault, db = args.work / f"vault-{args.notes}", args.work / f"db-{args.notes}"
    notes = sorted(vault.rglob("*.md"))
    queries = [q["short_query"] for q in topic_queries(args.searches, 5, args.notes)]
    cfg = load_config("fake").replace(fake={"embed_sleep_s": args.sleep_s})
    with fanout.open(db, config=cfg) as kb:
        kb.index(vault)
        if args.face == "serve":
            from fanout.serve.app import App

            app = App(str(kb.db), kb)  # (no answers remembered: every request searches)

            def ask(i: int) -> None:
                app.run({"mode": "search", "query": queries[i % len(queries)]})
        else:
            def ask(i: int) -> None:
                kb.search(queries[i % len(queries)], mode="search")
        ask(0)
        idle, idle_cpu = [], []
        for i in range(len(queries)):
            t, c = time.perf_counter(), time.thread_time()
            ask(i)
            idle.append(time.perf_counter() - t)
            idle_cpu.append(time.thread_time() - c)
        for n in range(args.round_notes):
            k = args.seed * 1000 + n
            with open(notes[(k * 104729 + 13) % len(notes)], "a", encoding="utf-8") as f:
                f.write(f"\n\nEdited by the benchmark: {k}.\n")
        worker = None
        if args.round_in == "worker":  # started and warmed as a watcher does at its first idle tick
            from fanout.api.round_worker import RoundWorker

            worker = RoundWorker(kb.db, kb.collection, kb.cfg)
            worker.warm()
        base = sys.getswitchinterval()
        sys.setswitchinterval(args.switch_ms / 1e3)
        try:
            during, during_cpu, span = searches_beside_a_round(kb, vault, ask, args.round_in, args.sleep_s, worker)
        finally:
            sys.setswitchinterval(base)
            if worker is not None:
                worker.close()
    row = {f"{k}{q}": pct(xs, q / 100) * 1e3 for k, xs in (("idle", idle), ("during", during)) for q in (50, 90, 99)}
    return {**row, "n": len(during), **span, "cpu": statistics.median(idle_cpu) * 1e3,
            "cpu_d": statistics.median(during_cpu) * 1e3}


def run_child(py: str, root: Path, argv: list[str]) -> dict:
    """This file's `child` run by `py` in checkout `root` (its fanout, its bench helpers)."""
    code = ("import runpy, sys; sys.path.insert(0, sys.argv[1]); sys.argv = [sys.argv[2]] + sys.argv[3:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    out = subprocess.run([py, "-c", code, str(root), __file__, "--child", *argv], cwd=root, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def rev(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], check=False,
                          capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--notes", type=int, default=5000)
    ap.add_argument("--round-notes", type=int, default=50)
    ap.add_argument("--face", default="kb", help="comma-separated: kb, serve")
    ap.add_argument("--embed-sleep-s", default="0", help="comma-separated")
    ap.add_argument("--switch-ms", default="5", help="comma-separated; the round's switch interval")
    ap.add_argument("--round-in", default="thread", help="comma-separated: thread (kb.index beside the searches), "
                    "process (a fresh process of its own, until one search of its version), worker (the watcher's: "
                    "kb.index_in a kept RoundWorker, until its version is served)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--searches", type=int, default=200, help="idle searches per run")
    ap.add_argument("--work", type=Path, default=Path("/tmp/watch-idle"))
    ap.add_argument("--baseline-root", type=Path, default=None, help="a checkout to measure beside this one")
    ap.add_argument("--baseline-python", default=None, help="its interpreter (a venv whose fanout is that checkout)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sleep-s", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.switch_ms = float(args.switch_ms)
        print(json.dumps(child(args)))
        return 0

    from bench.synthetic_vault import synthetic_vault

    vault = args.work / f"vault-{args.notes}"
    if not vault.exists():
        synthetic_vault(args.work / "vault-tmp", args.notes).rename(vault)
    versions = [("this", sys.executable, ROOT)]
    if args.baseline_root is not None:
        versions.insert(0, (f"baseline {rev(args.baseline_root)}", args.baseline_python or sys.executable,
                            args.baseline_root.resolve()))
    rows: dict[tuple, list[dict]] = {}
    loads = []
    for seed, (_, face, sleep_s, switch_ms, round_in, (name, py, root)) in enumerate(itertools.product(
            range(args.repeat), args.face.split(","), map(float, args.embed_sleep_s.split(",")),
            map(float, args.switch_ms.split(",")), args.round_in.split(","), versions), 1):
        loads.append(os.getloadavg()[0])
        row = run_child(py, root, ["--notes", str(args.notes), "--round-notes", str(args.round_notes), "--face", face,
                                   "--sleep-s", str(sleep_s), "--switch-ms", str(switch_ms), "--searches",
                                   str(args.searches), "--work", str(args.work.resolve()), "--seed", str(seed)]
                        + (["--round-in", round_in] if round_in != "thread" else []))
        rows.setdefault((face, sleep_s, switch_ms, round_in, name), []).append(row)
        print(f"{face} {sleep_s:g} {switch_ms:g} {round_in} {name}: p99 idle / during {row['idle99']:.1f} / "
              f"{row['during99']:.1f} ms ({row['n']} searches)", file=sys.stderr, flush=True)
    print(f"\n{args.notes} notes, a {args.round_notes}-note round, {os.cpu_count()} cores, load (1 min) "
          f"{min(loads):.1f}-{max(loads):.1f}; this = {rev(ROOT)} (and what is not committed); medians over "
          f"{args.repeat} interleaved runs, each a fresh process (ratio: during / idle, per run)\n")
    print("| face | embed sleep s/text | switch ms | round in | version | p99 idle / during ms | ratio p50 / p90 / p99 | "
          "search CPU ms idle / during | searches during | round wall s (until served) | round CPU s: its "
          "thread / all threads |\n|---|---|---|---|---|---|---|---|---|---|---|")
    for (face, sleep_s, switch_ms, round_in, name), rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "ready" or all("ready" in r for r in rs)}
        ratios = " / ".join(f"{statistics.median(r[f'during{q}'] / r[f'idle{q}'] for r in rs):.1f}x" for q in (50, 90, 99))
        print(f"| {face} | {sleep_s:g} | {switch_ms:g} | {round_in} | {name} | {med['idle99']:.1f} / {med['during99']:.1f} | "
              f"{ratios} | {med['cpu']:.1f} / {med['cpu_d']:.1f} | {med['n']:.0f} | {med['wall']:.2f} "
              f"({med.get('ready', med['wall']):.2f}) | {med['round_cpu']:.2f} / {med['process_cpu']:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
