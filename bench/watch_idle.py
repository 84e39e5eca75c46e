"""What a watcher costs while nothing changes: a synthetic vault (bench/synthetic_vault.py) indexed with the fake
models, a watcher started on it (`kb.watch(vault, initial=False)`), then the process's CPU time (every thread:
the watcher's, watchfiles' Rust thread, lance's) over `--idle-s` seconds of no change. One note edited afterwards
checks the watcher was alive all along (its round must come).

    .venv/bin/python -m bench.watch_idle --notes 20000 --idle-s 60 --work /tmp/watch-idle

The vault and index are kept under --work, so a second run skips the writing and indexing.
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time
from pathlib import Path

from bench.synthetic_vault import synthetic_vault


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--notes", type=int, default=20_000)
    ap.add_argument("--idle-s", type=float, default=60.0, help="seconds of no change to measure")
    ap.add_argument("--work", type=Path, default=Path("/tmp/watch-idle"))
    args = ap.parse_args(argv)

    import fanout
    from fanout.config import load_config

    vault, db = args.work / f"vault-{args.notes}", args.work / f"db-{args.notes}"
    if not vault.exists():
        synthetic_vault(args.work / "vault-tmp", args.notes).rename(vault)
    cfg = load_config("fake")
    with fanout.open(db, config=cfg) as kb:
        t = time.perf_counter()
        rep = kb.index(vault)
        index_s = time.perf_counter() - t
        w = kb.watch(vault, initial=False)
        time.sleep(2.0)  # the watcher's thread and watchfiles' are up
        threads = threading.active_count()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        time.sleep(args.idle_s)
        idle_cpu, idle_wall = time.process_time() - cpu0, time.perf_counter() - wall0
        notes = sorted(vault.rglob("*.md"))[:2]
        rounds = []
        for i, note in enumerate(notes, 1):  # the first round after the idle time, then a second one
            note.write_text(note.read_text(encoding="utf-8") + "\nOne more line.\n", encoding="utf-8")
            t = time.perf_counter()
            alive = w.wait(i, timeout=120)
            rounds.append(time.perf_counter() - t)
            if not alive:
                break
        w.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n{args.notes} notes, {rep.chunks} chunks, fake models, {os.cpu_count()} cores; "
          f"index (or resume) {index_s:.1f} s, peak RSS {rss:.0f} MB\n")
    print("| what | measured |\n|---|---|")
    print(f"| watcher's process CPU over {idle_wall:.0f} s of no change | {idle_cpu * 1e3:.0f} ms "
          f"({idle_cpu / idle_wall * 100:.2f}% of one core) |")
    print(f"| threads in the process while watching | {threads} |")
    print(f"| one note edited after the idle time: its round came | {'yes' if alive else 'NO'}, "
          f"{' then '.join(f'{x:.1f} s' for x in rounds)} after the save (first and second edit; "
          f"watch.step_ms {cfg.watch.step_ms} included) |")
    return 0 if alive else 1


if __name__ == "__main__":
    raise SystemExit(main())
