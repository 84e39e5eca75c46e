"""What `--watch` costs on the 176-page English benchmark corpus: save -> searchable, idle CPU, a `git checkout`.

    .venv/bin/python -m bench.watch_cost [--bench DIR] [--config local] [--base-db DIR
        --base-collection NAME] [--saves 5] [--idle-s 60] [--checkout 50]

The corpus is copied to a temp folder (made a git repository there), never into the repo; the index is built
there too, or copied from `--base-db` (an index of that corpus with the same profile, to skip embedding 176
pages first). One process: `KnowledgeBase.watch` on the copy, the embedder loaded before the clock starts.

- save -> searchable: one note gets a sentence with a new word (a plain write), and the clock runs until a
  full-text search finds the note there; split into the wait for the batch to close (`watch.step_ms`) and the
  round (the note read and embedded, the write; searches go on meanwhile). Repeated on `--saves` notes; medians.
- idle CPU: the process's, the watcher thread's and its round worker's CPU seconds (/proc) over `--idle-s`
  seconds with no event.
- git checkout: a branch that changes `--checkout` notes is checked out at once; the rounds it started are
  counted (one is the target), with what they embedded and the time until the last one finished.
Prints one table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("LANCEDB_LOG", "error")

import fanout
from bench.child_process import proc_cpu_s
from fanout.evaluation.bench_data import corpus_dir

TICKS = os.sysconf("SC_CLK_TCK")


def git(vault: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(vault), "-c", "user.name=bench", "-c", "user.email=bench@example.invalid",
                    *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def prepare(args: argparse.Namespace, tmp: Path) -> tuple[Path, Path, list[str]]:
    """The corpus copy as a git repository, on its main branch, with a branch `edited` that changes
    `--checkout` notes; the db (copied from --base-db when given); the changed notes."""
    vault, db = tmp / "vault", tmp / "db"
    shutil.copytree(corpus_dir(args.bench, "en"), vault)
    notes = sorted(str(p.relative_to(vault)) for p in vault.rglob("*.md"))
    git(vault, "init", "-q", "-b", "main")
    git(vault, "add", "-A")
    git(vault, "commit", "-q", "-m", "corpus")
    git(vault, "checkout", "-q", "-b", "edited")
    step = max(1, len(notes) // args.checkout)
    changed = notes[::step][:args.checkout]
    for rel in changed:
        with open(vault / rel, "a", encoding="utf-8") as f:
            f.write("\n\nEdited on the branch the benchmark checks out.\n")
    git(vault, "commit", "-q", "-am", "edited")
    git(vault, "checkout", "-q", "main")
    if args.base_db:
        db.mkdir()
        name = args.base_collection
        for entry in Path(args.base_db).iterdir():  # the collection's manifest and tables, not caches or locks
            if entry.name in (f"{name}.manifest.json", f"{name}_chunks.lance", f"{name}_documents.lance"):
                (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, db / entry.name)
    return vault, db, changed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=None, help="the benchmark folder (default $FANOUT_BENCH or "
                    "../shared/eval/obsidian-help)")
    ap.add_argument("--config", default="local", help="profile (default local: `fanout index`'s default)")
    ap.add_argument("--base-db", default=None, help="an index of the English corpus with this profile to copy")
    ap.add_argument("--base-collection", default="notes", help="its collection (default notes)")
    ap.add_argument("--saves", type=int, default=5, help="one-note saves timed (default 5)")
    ap.add_argument("--idle-s", type=float, default=60.0, help="seconds of idle CPU measured (default 60)")
    ap.add_argument("--checkout", type=int, default=50, help="notes the checked-out branch changes (default 50)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fanout-watch-bench-") as tmp_:
        vault, db, changed = prepare(args, Path(tmp_))
        rows = run(args, vault, db, changed)
    cfg = fanout.open(db, config=args.config).cfg.watch
    print(f"\nwatch mode on the 176-page English corpus, profile {args.config} (watch.step_ms {cfg.step_ms}, "
          f"debounce_ms {cfg.debounce_ms}, tick_ms {cfg.tick_ms})\n")
    print("| measure | value | target |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


def run(args: argparse.Namespace, vault: Path, db: Path, changed: list[str]) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    with fanout.open(db, collection=args.base_collection, config=args.config) as kb:
        t = time.perf_counter()
        first = kb.index(vault)  # (a copied index: nothing to embed) before the clock, as a running watcher
        print(f"index before watching: {first.text()} ({time.perf_counter() - t:.1f} s)", file=sys.stderr)
        kb.warm([kb.collection])  # the embedder loaded: a running watcher has it
        done_rounds: list = []
        w = kb.watch(vault, on_round=done_rounds.append)
        assert w.wait(1, 600) and w.last.error is None, w.last
        assert w.warmed.wait(600)  # what a round loads on first use, loaded at the first idle tick (not idle CPU)
        step = kb.cfg.watch.step_ms / 1000

        # idle CPU
        thread = next(t for t in threading.enumerate() if t.name == "fanout-watch")
        tstat = f"/proc/self/task/{thread.native_id}/stat"
        time.sleep(2)  # the first round's after-effects settle
        wstat = f"/proc/{w.worker.pid}/stat" if w.worker is not None and w.worker.pid else None  # (rounds_in)
        p0, t0, w0 = proc_cpu_s("/proc/self/stat"), proc_cpu_s(tstat), time.monotonic()
        k0 = proc_cpu_s(wstat) if wstat else 0.0
        time.sleep(args.idle_s)
        p1, t1, wall = proc_cpu_s("/proc/self/stat"), proc_cpu_s(tstat), time.monotonic() - w0
        k1 = proc_cpu_s(wstat) if wstat else 0.0
        rows.append((f"idle CPU over {wall:.0f} s: whole process / the watcher's thread / its round worker",
                     (f"{p1 - p0:.2f} s ({(p1 - p0) / wall * 100:.2f}% of a core) / {t1 - t0:.2f} s / "
                      f"{f'{k1 - k0:.2f} s' if wstat else 'none (rounds in the thread)'} (clock tick "
                      f"{1 / TICKS:.2f} s)"), "none measurable"))
        assert w.rounds == 1, "an event came while idle"

        # one-note saves
        notes = sorted(str(p.relative_to(vault)) for p in vault.rglob("*.md") if str(p.relative_to(vault))
                       not in changed)
        total, waits, rounds, embeds, chunks = [], [], [], [], []
        for i in range(args.saves):
            rel = notes[(i * 37) % len(notes)]
            word = f"quokkafrost{i}"
            n = w.rounds
            t0 = time.time()
            with open(vault / rel, "a", encoding="utf-8") as f:
                f.write(f"\n\nA {word} is the word this save adds.\n")
            assert w.wait(n + 1, 600) and w.last.error is None, w.last
            while rel not in [h.path for h in kb.search(word, mode="search", n=3)]:
                assert time.time() - t0 < 600, f"{rel} not found"
                time.sleep(0.05)
            total.append(time.time() - t0)
            r = w.last
            waits.append(r.started - t0)
            rounds.append(r.seconds)
            embeds.append(r.report.embed_seconds)
            chunks.append(r.report.embedded_chunks)
            print(f"save {i + 1}: {rel}: {total[-1]:.2f} s ({r.text()})", file=sys.stderr)
        med = statistics.median
        rows.append((f"one-note save -> searchable, median of {args.saves} (min-max)",
                     f"{med(total):.2f} s ({min(total):.2f}-{max(total):.2f})",
                     f"step {step:.1f} s + the note's embedding ({med(embeds):.2f} s)"))
        rows.append(("  of which: the batch closing (quiet for watch.step_ms) and the round starting",
                     f"{med(waits):.2f} s", f"{step:.1f} s"))
        rows.append((("  of which: the round (the note read and embedded, the write; in the worker process "
                      "under watch.rounds_in, searches served meanwhile)"), (f"{med(rounds):.2f} s, embedding "
                     f"{med(embeds):.2f} s of it ({med(chunks):.0f} chunks)"), ""))

        # git checkout of many notes
        n = w.rounds
        t0 = time.time()
        git(vault, "checkout", "-q", "edited")
        assert w.wait(n + 1, 1800), "no round after the checkout"
        quiet = step + kb.cfg.watch.tick_ms / 1000 + 2.0  # any further round would have started by then
        while w.wait(w.rounds + 1, quiet):
            pass
        these = done_rounds[n:]
        done = these[-1].started + these[-1].seconds - t0
        rows.append((f"`git checkout` changing {len(changed)} notes: index rounds", str(len(these)),
                     f"1 (not {len(changed)})"))
        rows.append(("  notes / chunks embedded, seconds from the checkout to searchable",
                     (f"{sum(r.report.embedded_notes for r in these if r.report)} / "
                     f"{sum(r.report.embedded_chunks for r in these if r.report)}, {done:.1f} s"), ""))
        w.stop()
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
