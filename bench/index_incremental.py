"""What an index round costs at the vault sizes users have: a synthetic vault (bench/synthetic_vault.py, ~3 chunks a
note), fake models (only fanout's own work shows), this checkout against an older commit in the same run.

    .venv/bin/python -m bench.index_incremental --scale-notes 20000 [--baseline eb4005e]
        [--rounds 3] [--searches 200] [--round-notes 50] [--embed-sleep-s 0.002] [--dim 768] [--work DIR]

Per code version, one fresh process on its own copy of the vault, running the tree of a commit (`git archive`,
this venv): HEAD (commit first: edits not committed are not measured) and `--baseline REV`:
- first index: `kb.index(vault)` on an empty db: seconds, ms per chunk, and the process's peak RSS (VmHWM);
- no change: `kb.index(vault)` again, the median of `--rounds`;
- one note: one note edited (a sentence appended), then `kb.index(vault)`: the median of `--rounds` (fake
  embedder, no sleep: the round outside the note's embedding); then the same given the note's path
  (`kb.index(vault, paths=[note])`, what a watch round runs: only that path is stat'ed and read);
- search p99: `kb.search(mode="search")` of `--searches` topic queries, idle, and from a second thread while a
  round of `--round-notes` edited notes runs (that round's embedder sleeps `--embed-sleep-s` a chunk, standing in
  for a model, so the round lasts long enough to search through).
Prints one table. The vault is written once under `--work` (kept, reused when it holds the same size).
`--watch-only` (a size where the whole run does not fit, e.g. `--scale-notes 133000 --dim 64`): the first index and
the watch rounds only (given the note's path), each round's CPU beside its wall, the query files' jobs that run
after it (waited for, timed apart), and the process's RSS after the rounds. A baseline's `fanout.pipelines` and `fanout.actors` come from the editable
install of the interpreter that runs it: `--baseline-python CHECKOUT/.venv/bin/python` for that checkout's. `--template DIR` (with `--watch-only`): DIR/vault and DIR/db, a vault indexed
before (by any version whose tables this one reads), copied for each version instead of a first index.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.child_process import add_child_flags, peak_rss_mb, run_child

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LANCEDB_LOG", "error")


def rss_mb() -> float:
    """This process's resident memory now (VmRSS), MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))] if xs else float("nan")


def edit(path: Path, tag: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"\n\nEdited by the benchmark: {tag}.\n")


def child(args: argparse.Namespace) -> dict:
    """One code version's measurements (run in a process of its own, `fanout` from that version's tree)."""
    import fanout
    from bench.synthetic_vault import topic_queries
    from fanout.config import load_config

    vault, db = Path(args.vault), Path(args.db)
    cfg = load_config("fake").replace(fake={"dim": args.dim})
    notes = sorted(vault.rglob("*.md"))
    queries = [q["short_query"] for q in topic_queries(args.searches, 5, args.scale_notes)]
    out: dict = {"code": fanout.__file__}
    with fanout.open(db, config=cfg) as kb:
        t = time.perf_counter()
        rep = kb.index(vault)  # (`--template`: the copied index, every note stat'ed again)
        out["chunks"] = rep.chunks
        if not args.template:
            out["first_s"] = time.perf_counter() - t
            out["first_rss_mb"] = peak_rss_mb()
        if args.watch_only:
            return watch_rounds(kb, vault, notes, args, out)
        times = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            kb.index(vault)
            times.append(time.perf_counter() - t)
        out["nochange_s"] = statistics.median(times)
        times = []
        for i in range(args.rounds):
            edit(notes[(i * 7919) % len(notes)], f"round {i}")
            time.sleep(0.01)
            t = time.perf_counter()
            kb.index(vault)
            times.append(time.perf_counter() - t)
        out["one_note_s"] = statistics.median(times)
        times = []
        for i in range(args.rounds):  # a watch round: given the edited note's path (its event), not a whole walk
            note = notes[(i * 7919 + 4099) % len(notes)]
            edit(note, f"paths round {i}")
            time.sleep(0.01)
            t = time.perf_counter()
            kb.index(vault, paths=[note])
            times.append(time.perf_counter() - t)
        out["one_note_paths_s"] = statistics.median(times)
        kb.search(queries[0], mode="search")
        idle = []
        for q in queries:
            t = time.perf_counter()
            kb.search(q, mode="search")
            idle.append(time.perf_counter() - t)
        out["search_idle_p99_ms"] = p99(idle) * 1e3
    slow = cfg.replace(fake={"embed_sleep_s": args.embed_sleep_s})  # the same fake model, slower
    with fanout.open(db, config=slow) as kb:
        kb.search(queries[0], mode="search")
        for i in range(args.round_notes):
            edit(notes[(i * 104729 + 13) % len(notes)], f"batch {i}")
        done = threading.Event()
        span = {}

        def round_():
            t = time.perf_counter()
            kb.index(vault)
            span["s"] = time.perf_counter() - t
            done.set()

        th = threading.Thread(target=round_)
        th.start()
        during = []
        i = 0
        while not done.is_set():
            t = time.perf_counter()
            kb.search(queries[i % len(queries)], mode="search")
            if not done.is_set() or not during:
                during.append(time.perf_counter() - t)
            i += 1
        th.join()
        out["round_s"] = span["s"]
        out["searches_during"] = len(during)
        out["search_round_p99_ms"] = p99(during) * 1e3
    return out


def watch_rounds(kb, vault: Path, notes: list[Path], args: argparse.Namespace, out: dict) -> dict:
    """`--watch-only`: the watch rounds given the edited note's path: wall and CPU of each, then the wait for the
    query files' jobs that run after it (version_files.later; absent in older code: 0)."""
    try:
        from fanout.store.version_files import wait
    except ImportError:
        def wait() -> None:
            return None
    wait()
    walls, cpus, jobs = [], [], []
    for i in range(args.rounds):
        note = notes[(i * 7919 + 4099) % len(notes)]
        edit(note, f"paths round {i}")
        time.sleep(0.01)
        t, c = time.perf_counter(), time.process_time()
        kb.index(vault, paths=[note])
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
        t = time.perf_counter()
        wait()
        jobs.append(time.perf_counter() - t)
    out.update(one_note_paths_s=statistics.median(walls), one_note_paths_cpu_s=statistics.median(cpus),
               jobs_after_s=statistics.median(jobs), rounds_rss_mb=rss_mb())
    return out


def run_version(name: str, code: Path, vault: Path, work: Path, args: argparse.Namespace) -> dict:
    copy, db = work / f"vault-{name}", work / f"db-{name}"
    for p in (copy, db):
        shutil.rmtree(p, ignore_errors=True)
    if args.template:
        vault = Path(args.template) / "vault"
        shutil.copytree(Path(args.template) / "db", db)
    shutil.copytree(vault, copy, copy_function=shutil.copy)  # fresh mtimes: no note is older than its copy
    time.sleep(2.5)  # past the stat fast path's racy window: the copies' stats are trusted after the first index
    # this checkout's measuring code (its options) over the version's fanout (first on the path)
    py = args.baseline_python if name == "base" and args.baseline_python else sys.executable
    cmd = [py, str(Path(__file__).resolve()), "--child", "--vault", str(copy), "--db", str(db),
           "--scale-notes", str(args.scale_notes), "--rounds", str(args.rounds), "--searches", str(args.searches),
           "--round-notes", str(args.round_notes), "--embed-sleep-s", str(args.embed_sleep_s), "--dim", str(args.dim)] + \
        (["--watch-only"] if args.watch_only else []) + (["--template", args.template] if args.template else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)])}  # bench.query_cost.child_env: why
    t = time.perf_counter()
    got = run_child(cmd, name, code, env)
    got["wall_s"] = time.perf_counter() - t
    for p in (copy, db):
        shutil.rmtree(p, ignore_errors=True)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale-notes", type=int, default=20_000)
    ap.add_argument("--baseline", default=None, help="a commit to measure beside this checkout (e.g. eb4005e)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--round-notes", type=int, default=50)
    ap.add_argument("--embed-sleep-s", type=float, default=0.002)
    ap.add_argument("--dim", type=int, default=768, help="fake embedder's vector size (the real model's: 768)")
    ap.add_argument("--work", default=None, help="where the vault is kept (default: a temporary folder)")
    ap.add_argument("--watch-only", action="store_true",
                    help="the first index and the watch rounds only (a size where the whole run does not fit)")
    ap.add_argument("--baseline-python", default=None,
                    help="the baseline's interpreter: a venv whose editable install maps fanout.pipelines and "
                         "fanout.actors to the baseline's checkout (else they are this checkout's)")
    ap.add_argument("--template", default=None, help="with --watch-only: DIR/vault and DIR/db indexed before")
    add_child_flags(ap)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    from bench.synthetic_vault import synthetic_vault

    with tempfile.TemporaryDirectory(prefix="fanout-incr-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        vault = work / f"vault-{args.scale_notes}"
        if not vault.exists() and not args.template:
            synthetic_vault(work / "vault-tmp", args.scale_notes).rename(vault)
        versions = {}
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        for name, rev in ([("base", args.baseline)] if args.baseline else []) + [("this", head)]:
            code = Path(tmp) / f"code-{name}"  # the commit's tree (this checkout's edits not committed are not in it)
            code.mkdir()
            arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(code)], input=arch, check=True)
            versions[f"{'before' if name == 'base' else 'this'} ({rev})"] = run_version(name, code, vault, work, args)
    rows = [("first index, s", "first_s", "{:.1f}"), ("  ms per chunk", None, "{:.2f}"),
            ("  peak RSS, MB", "first_rss_mb", "{:.0f}"), ("no change: kb.index, s", "nochange_s", "{:.3f}"),
            ("one note edited: round, s", "one_note_s", "{:.3f}"),
            ("  given its path (a watch round), s", "one_note_paths_s", "{:.3f}"),
            ("    its CPU, s", "one_note_paths_cpu_s", "{:.3f}"),
            ("    then the query files' jobs, s", "jobs_after_s", "{:.3f}"),
            ("  the process's RSS after those rounds, MB", "rounds_rss_mb", "{:.0f}"),
            ("search p99 idle, ms", "search_idle_p99_ms", "{:.1f}"),
            (f"search p99 during a {args.round_notes}-note round, ms", "search_round_p99_ms", "{:.1f}"),
            ("  that round, s / searches in it", None, ""), ]
    names = list(versions)
    print(f"{args.scale_notes} notes, {next(iter(versions.values()))['chunks']} chunks, fake models (dim {args.dim}),"
          f" {os.cpu_count()} cores, load average before {os.getloadavg()[0]:.1f}")
    print("| what | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, key, fmt in rows:
        cells = []
        for n in names:
            v = versions[n]
            if label.strip() == "ms per chunk" and "first_s" not in v:
                cells.append("n/a")
            elif label.strip() == "ms per chunk":
                cells.append(f"{v['first_s'] * 1e3 / max(1, v['chunks']):.2f}")
            elif key is None and "round_s" not in v:
                cells.append("n/a")
            elif key is None:
                cells.append(f"{v['round_s']:.1f} / {v['searches_during']}")
            else:
                cells.append(fmt.format(v[key]) if key in v else "n/a")  # (an older version's bench lacks it)
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
