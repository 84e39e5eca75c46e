"""What a first index costs outside the models: `kb.index(vault)` on an empty db over a synthetic vault
(bench/synthetic_vault.py, ~3 chunks a note), fake models, this checkout against an older commit in the same run.

    .venv/bin/python -m bench.index_first --scale-notes 20000 [--baseline cd1ea9b] [--repeat 1] [--dim 768]
        [--work DIR]

Per code version and repeat, one fresh process running the tree of a commit (`git archive`, this venv): HEAD
(commit first: edits not committed are not measured) and `--baseline REV`, interleaved (base, this, base, ...).
Each reports the first index's wall and CPU seconds, the seconds spent inside the embedder's calls (the fake
model: a hashed bag of words, standing in for the model), the rest ("outside the models": fanout's own work)
per chunk, the process's peak RSS (VmHWM: the lancedb import, the pipeline, the writes; the fake model holds
nothing) and where the wall time went by stage (each stage function wrapped with a timer in the child: the
scan, chunking, the Lance writes, Lance's full-text index build, the scalar and vector indexes (IVF from
`index.vector_index_min_rows` chunks), the full-text postings files). Prints one table.
The vault is written once under `--work` (kept, reused when it holds the same size).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.child_process import add_child_flags, peak_rss_mb, run_child

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LANCEDB_LOG", "error")
# stage -> (module, attribute) wrapped with a timer; pipelines/index.py imports the first four by name
# stage -> (module, function) places it is called from, in this tree or an older one (each one found is timed)
STAGES = {"scan": [("fanout.pipelines.index", "scan_vault")], "chunk": [("fanout.pipelines.index", "chunk_notes")],
          "write": [("fanout.pipelines.index", "write_index")],
          "fts index": [("fanout.pipelines.index", "build_fts"), ("fanout.pipelines.table_upkeep", "build_fts")],
          "scalar+vector indexes": [("fanout.pipelines.index", "build_indexes")],
          "postings": [("fanout.store.fts_postings", "ensure")]}


def _timed(spent: dict[str, float], name: str, fn):
    """fn, adding its wall seconds to spent[name] and its process CPU seconds to spent[name + " cpu"]."""
    def wrapper(*a, **k):
        t, c = time.perf_counter(), time.process_time()
        try:
            return fn(*a, **k)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t
            spent[name + " cpu"] = spent.get(name + " cpu", 0.0) + time.process_time() - c
    return wrapper


def child(args: argparse.Namespace) -> dict:
    """One code version's first index (in a process of its own, `fanout` from that version's tree)."""
    import importlib

    t_import = time.perf_counter()
    import fanout

    # this tree's actors/ and pipelines/ as fanout.actors / fanout.pipelines: found on fanout's path before the
    # venv's editable install maps them to the checkout it was made from (which a baseline is not)
    fanout.__path__.append(os.getcwd())
    from fanout.actors import fake

    from fanout.config import load_config

    assert fake.__file__.startswith(os.getcwd()), fake.__file__

    spent: dict[str, float] = {}
    for name, places in STAGES.items():
        for mod, attr in places:
            try:
                m = importlib.import_module(mod)
            except ImportError:  # (a module of another version)
                continue
            if hasattr(m, attr):
                setattr(m, attr, _timed(spent, name, getattr(m, attr)))
    fake.FakeEmbedder.__call__ = _timed(spent, "embedder", fake.FakeEmbedder.__call__)
    cfg = load_config("fake").replace(fake={"dim": args.dim})
    kb = fanout.open(args.db, config=cfg)
    import_s = time.perf_counter() - t_import
    cpu, t = time.process_time(), time.perf_counter()
    rep = kb.index(args.vault)
    first_s, cpu_s = time.perf_counter() - t, time.process_time() - cpu
    return {"chunks": rep.chunks, "first_s": first_s, "cpu_s": cpu_s, "import_s": import_s,
            "rss_mb": peak_rss_mb(), "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "stages": spent}


def run_version(name: str, code: Path, vault: Path, work: Path, args: argparse.Namespace) -> dict:
    db = work / f"db-{name}"
    shutil.rmtree(db, ignore_errors=True)
    cmd = [sys.executable, "-m", "bench.index_first", "--child", "--vault", str(vault), "--db", str(db),
           "--dim", str(args.dim)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT)])}  # bench.query_cost.child_env: why
    try:
        return run_child(cmd, name, code, env)
    finally:
        shutil.rmtree(db, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale-notes", type=int, default=20_000)
    ap.add_argument("--baseline", default=None, help="a commit to measure beside this checkout (e.g. cd1ea9b)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each version, interleaved (each its median)")
    ap.add_argument("--dim", type=int, default=768, help="fake embedder's vector size (the real model's: 768)")
    ap.add_argument("--work", default=None, help="where the vault is kept (default: a temporary folder)")
    add_child_flags(ap)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return 0
    from bench.synthetic_vault import synthetic_vault

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fanout-first-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        vault = work / f"vault-{args.scale_notes}"
        if not vault.exists():
            synthetic_vault(work / "vault-tmp", args.scale_notes).rename(vault)
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        revs = ([("base", args.baseline)] if args.baseline else []) + [("this", head)]
        runs: dict[str, list[dict]] = {}
        for name, rev in revs:
            code = Path(tmp) / f"code-{name}"  # the commit's tree (this checkout's edits not committed are not in it)
            code.mkdir()
            arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(code)], input=arch, check=True)
            (code / "bench").mkdir(exist_ok=True)  # this measuring script in each tree (an older one lacks it)
            shutil.copy(Path(__file__), code / "bench" / "index_first.py")
        for _ in range(args.repeat):
            for name, rev in revs:
                runs.setdefault(f"{'before' if name == 'base' else 'this'} ({rev})", []).append(
                    run_version(name, Path(tmp) / f"code-{name}", vault, work, args))
    print(f"{args.scale_notes} notes, {next(iter(runs.values()))[0]['chunks']} chunks, fake models (dim {args.dim}),"
          f" {os.cpu_count()} cores, load average {load:.1f} before, {os.getloadavg()[0]:.1f} after;"
          f" median of {args.repeat}")
    table(runs)
    return 0


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def _fmt(fmt: str, rs: list[dict], f) -> str:
    """The median of f over the runs, formatted (f giving a pair: each of the two, "a / b")."""
    got = [f(r) for r in rs]
    if isinstance(got[0], tuple):
        return " / ".join(fmt.format(_median([g[i] for g in got])) for i in range(len(got[0])))
    return fmt.format(_median(got))


def table(runs: dict[str, list[dict]]) -> None:
    rows = [("first index, s (wall)", lambda r: r["first_s"], "{:.1f}"),
            ("  CPU, s", lambda r: r["cpu_s"], "{:.1f}"),
            ("  inside the embedder, s", lambda r: r["stages"].get("embedder", 0.0), "{:.1f}"),
            ("  outside the models, s", lambda r: r["first_s"] - r["stages"].get("embedder", 0.0), "{:.1f}"),
            ("  outside the models, ms a chunk",
             lambda r: (r["first_s"] - r["stages"].get("embedder", 0.0)) * 1e3 / max(1, r["chunks"]), "{:.2f}"),
            ("  outside the models, CPU ms a chunk",
             lambda r: (r["cpu_s"] - r["stages"].get("embedder cpu", 0.0)) * 1e3 / max(1, r["chunks"]), "{:.2f}"),
            ("  peak RSS (VmHWM), MB", lambda r: r["rss_mb"], "{:.0f}")]
    rows += [(f"  stage {s}, s wall / CPU", (lambda r, s=s: (r["stages"].get(s, float("nan")),
                                                            r["stages"].get(s + " cpu", float("nan")))), "{:.1f}")
             for s in STAGES]
    rows += [("import fanout + open, s (not in the above)", lambda r: r["import_s"], "{:.1f}")]
    names = list(runs)
    print("| what | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, f, fmt in rows:
        print(f"| {label} | " + " | ".join(_fmt(fmt, runs[n], f) for n in names) + " |")


if __name__ == "__main__":
    raise SystemExit(main())
