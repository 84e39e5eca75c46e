"""What the query files' jobs cost after a one-note watch round (pipelines/query_files.py: the full-text postings and
the exact-search vectors brought to the round's version), and what the searches right after cost, per code version.

    .venv/bin/python -m bench.round_jobs --template DIR [--rounds 6] [--dim 64] [--repeat 2]
        [--baseline-python CHECKOUT/.venv/bin/python] [--work DIR]

`--template DIR`: DIR/vault and DIR/db, a vault indexed before with `load_config("fake")` at `--dim` (e.g. the
bench/synthetic_vault.py vault that bench/index_incremental.py writes, indexed once). Per code version and repeat
(the versions taking turns), one fresh process on its own copy of DIR (each interpreter's own checkout: its
editable install) runs `--rounds` watch rounds (`kb.index(vault, paths=[note])`, one note edited), with the jobs
run in the measuring thread after each round instead of a background thread (timed apart: wall and that thread's
CPU), then
one search (the first of the new version: what a save waits for to be searchable) and four more (their median).
The process searches before the first round, so it holds the postings and vectors a serving process holds.
Medians over the rounds after the first (the first round of a process is not a watch process's usual one).
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERIES = ["sync notes backup", "garden tomato plugin", "router media server", "daily template"]
KEYS = [("jobs_cpu", "jobs: CPU s"), ("jobs_wall", "jobs: wall s"), ("round_cpu", "round: CPU s"),
        ("first_search_ms", "first search after: ms"), ("search_ms", "searches then: ms")]


def child(args: argparse.Namespace) -> dict:
    """One code version's rounds (run in a process of its own, `fanout` from its interpreter's checkout)."""
    os.environ.setdefault("LANCEDB_LOG", "error")
    import fanout
    from fanout.config import load_config
    from fanout.store import version_files

    cfg = load_config("fake").replace(fake={"dim": args.dim})
    pending: list = []
    version_files.later = lambda key, job, name: pending.append(job)  # the jobs run below, timed apart
    notes = sorted(Path(args.vault).rglob("*.md"))
    res: dict[str, list[float]] = {k: [] for k, _ in KEYS}
    with fanout.open(args.db, config=cfg) as kb:
        kb.search(QUERIES[0], mode="search")
        for i in range(args.rounds):
            note = notes[(i * 7919 + 4099) % len(notes)]
            with open(note, "a", encoding="utf-8") as f:
                f.write(f"\n\nEdited by the benchmark: round {i}.\n")
            c = time.process_time()
            kb.index(args.vault, paths=[note])
            res["round_cpu"].append(time.process_time() - c)
            t, c = time.perf_counter(), time.thread_time()  # (this thread's: the jobs', not a warm-up's beside)
            for job in pending:
                job()
            pending.clear()
            res["jobs_wall"].append(time.perf_counter() - t)
            res["jobs_cpu"].append(time.thread_time() - c)
            t = time.perf_counter()
            kb.search(QUERIES[i % len(QUERIES)], mode="search")
            res["first_search_ms"].append((time.perf_counter() - t) * 1e3)
            took = []
            for q in QUERIES:
                t = time.perf_counter()
                kb.search(q + " notes", mode="search")
                took.append(time.perf_counter() - t)
            res["search_ms"].append(statistics.median(took) * 1e3)
    return {k: statistics.median(v[1:] or v) for k, v in res.items()} | {"code": fanout.__file__}


def run(py: str, template: Path, work: Path, args: argparse.Namespace) -> dict:
    """`child` under the interpreter `py` on a fresh copy of the template."""
    vault, db = work / "vault", work / "db"
    for p in (vault, db):
        shutil.rmtree(p, ignore_errors=True)
    shutil.copytree(template / "vault", vault)
    shutil.copytree(template / "db", db)
    code = Path(py).absolute().parents[2]  # (CHECKOUT/.venv/bin/python: its checkout)
    cmd = [py, str(Path(__file__).resolve()), "--child", "--vault", str(vault), "--db", str(db),
           "--rounds", str(args.rounds), "--dim", str(args.dim)]
    res = subprocess.run(cmd, check=False, cwd=str(code), capture_output=True, text=True)
    if res.returncode:
        sys.stderr.write(res.stderr[-4000:])
        raise SystemExit(f"{py}: the measuring process failed ({res.returncode})")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", help="DIR/vault and DIR/db, indexed before (fake models, --dim)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=1, help="runs per version, the versions taking turns")
    ap.add_argument("--baseline-python", default=None, help="another checkout's interpreter: its code too")
    ap.add_argument("--work", default=None, help="where the copies go (default: a temporary folder)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--vault", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    if not args.template:
        ap.error("--template DIR is required")
    versions = {"this": sys.executable} | ({"base": args.baseline_python} if args.baseline_python else {})
    work = Path(args.work or tempfile.mkdtemp(prefix="round-jobs-"))
    got: dict[str, list[dict]] = {v: [] for v in versions}
    for r in range(args.repeat):
        for v, py in versions.items():
            got[v].append(run(py, Path(args.template), work / v, args))
            print(f"  {v} run {r + 1}: " + ", ".join(f"{k} {got[v][-1][k]:.3f}" for k, _ in KEYS), file=sys.stderr)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.template}: one-note watch rounds x {args.rounds} (medians after the first), fake models "
          f"(dim {args.dim}), medians of {args.repeat} run(s) per version; load {os.getloadavg()[0]:.1f}\n")
    print("| what | " + " | ".join(versions) + " |\n|---|" + "---|" * len(versions))
    for k, label in KEYS:
        print(f"| {label} | " + " | ".join(f"{statistics.median(x[k] for x in got[v]):.3f}" for v in versions) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
