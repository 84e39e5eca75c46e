"""What a watcher costs while nothing changes: a synthetic vault (bench/synthetic_vault.py) indexed with the fake
models, a watcher started on it as the faces start one (`kb.watch(vault)`: a first round, a whole walk that finds
nothing to do; then, at its first idle tick, it loads what a writing round needs), then the process's CPU time
(every thread: the watcher's, watchfiles' Rust thread, lance's), and its round worker process's (`watch.rounds_in`),
over `--idle-s` seconds of no change. Two notes
edited afterwards check the watcher was alive all along and time each save's round: the first save's must cost
what the second's does. `--no-initial`: `kb.watch(vault, initial=False)`, whose first event round is a whole walk.

    .venv/bin/python -m bench.watch_idle --notes 20000 --idle-s 60 --work /tmp/watch-idle [--no-warm] [--no-initial]

The vault and index are kept under --work, so a second run skips the writing and indexing.
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time
from pathlib import Path

from bench.child_process import proc_cpu_s
from bench.synthetic_vault import synthetic_vault


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--notes", type=int, default=20_000)
    ap.add_argument("--idle-s", type=float, default=60.0, help="seconds of no change to measure")
    ap.add_argument("--work", type=Path, default=Path("/tmp/watch-idle"))
    ap.add_argument("--no-initial", action="store_true", help="start the watcher with initial=False")
    ap.add_argument("--no-warm", action="store_true",
                    help="the watcher loads nothing ahead (as before Watcher._warm): the first save's round pays it")
    args = ap.parse_args(argv)

    import fanout
    from fanout.api.watcher import Watcher
    from fanout.config import load_config

    if args.no_warm:
        Watcher._warm = lambda self: self.warmed.set()  # type: ignore[method-assign]

    vault, db = args.work / f"vault-{args.notes}", args.work / f"db-{args.notes}"
    if not vault.exists():
        synthetic_vault(args.work / "vault-tmp", args.notes).rename(vault)
    cfg = load_config("fake")
    with fanout.open(db, config=cfg) as kb:
        t = time.perf_counter()
        rep = kb.index(vault)
        index_s = time.perf_counter() - t
        t = time.perf_counter()
        w = kb.watch(vault, initial=not args.no_initial)
        first = w.wait(1, timeout=600) if not args.no_initial else True
        warmed = w.warmed.wait(timeout=600) and first
        ready_s = time.perf_counter() - t
        time.sleep(1.0)  # the watcher's thread and watchfiles' are up
        threads = threading.active_count()
        pid = w.worker.pid if w.worker is not None else None  # (its rounds' process: watch.rounds_in)
        cpu0, wall0, wcpu0 = time.process_time(), time.perf_counter(), proc_cpu_s(f"/proc/{pid}/stat") if pid else 0.0
        time.sleep(args.idle_s)
        idle_cpu, idle_wall = time.process_time() - cpu0, time.perf_counter() - wall0
        idle_wcpu = (proc_cpu_s(f"/proc/{pid}/stat") - wcpu0) if pid else None
        notes = sorted(vault.rglob("*.md"))[:2]
        rounds = []
        done = w.rounds
        for i, note in enumerate(notes, 1):  # the first round after the idle time, then a second one
            note.write_text(note.read_text(encoding="utf-8") + "\nOne more line.\n", encoding="utf-8")
            t = time.perf_counter()
            alive = w.wait(done + i, timeout=120)
            rounds.append((time.perf_counter() - t, w.last.seconds if w.last else float("nan")))
            if not alive:
                break
            time.sleep(1.0)
        w.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n{args.notes} notes, {rep.chunks} chunks, fake models, {os.cpu_count()} cores; "
          f"index (or resume) {index_s:.1f} s, peak RSS {rss:.0f} MB\n")
    print("| what | measured |\n|---|---|")
    print(f"| watcher started -> {'first round done and ' if not args.no_initial else ''}a round's needs loaded | "
          f"{ready_s:.1f} s{'' if warmed else ' (NOT ready)'} |")
    print(f"| watcher's process CPU over {idle_wall:.0f} s of no change | {idle_cpu * 1e3:.0f} ms "
          f"({idle_cpu / idle_wall * 100:.2f}% of one core) |")
    if idle_wcpu is not None:
        print(f"| its round worker's process CPU over the same time | {idle_wcpu * 1e3:.0f} ms |")
    print(f"| threads in the process while watching | {threads} |")
    print(f"| a note edited after the idle time, then another: each round came | {'yes' if alive else 'NO'}, "
          f"{' then '.join(f'{x:.2f} s' for x, _ in rounds)} after the save (watch.step_ms {cfg.watch.step_ms} "
          f"included), the round itself {' then '.join(f'{r:.2f} s' for _, r in rounds)} |")
    return 0 if alive else 1


if __name__ == "__main__":
    raise SystemExit(main())
