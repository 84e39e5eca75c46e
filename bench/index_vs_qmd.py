"""`fanout index` vs `qmd embed` on the English benchmark corpus: wall time, back to back, repeated.

    .venv/bin/python -m bench.index_vs_qmd --qmd-root /work/scratch-qmd [--rounds 2]
        [--corpus ../shared/eval/obsidian-help/corpus/en] [--order fanout,qmd]

Each round indexes from scratch on both sides, one after the other (the order alternates per round):
fanout: `python -m fanout.cli.main index CORPUS --db <fresh dir>` in a subprocess (model load, scan, chunk, embed,
write, FTS; whatever runner it picks); qmd: `run_qmd.sh index` with its sqlite index removed first (`qmd
update` + `qmd embed`; the same GGUF, 2 threads). Both with the machine's default ggml variant choice.
Prints one table: seconds per side and round, and fanout's speed-up over qmd per round (the machine is
shared: the ratio within a round is the number to read).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QMD_SH = ROOT.parent / "shared" / "peers" / "qmd" / "run_qmd.sh"


def run_fanout(corpus: Path, tmp: Path) -> dict[str, object]:
    db = tmp / f"db-{time.monotonic_ns()}"
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "fanout.cli.main", "index", str(corpus), "--db", str(db)],
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                       check=False)
    wall = time.perf_counter() - t
    if p.returncode not in (0, 3):
        raise SystemExit(f"fanout index failed (rc {p.returncode}):\n{p.stderr[-2000:]}")
    out: dict[str, object] = {"wall_s": wall, "summary": " ".join(p.stdout.split())[-300:]}
    for key, pat in (("notes", r"notes (\d+)"), ("chunks", r"chunks (\d+)")):
        m = re.search(pat, p.stdout)
        if m:
            out[key] = int(m.group(1))
    shutil.rmtree(db, ignore_errors=True)
    return out


def run_qmd(corpus: Path, qmd_root: Path, gguf_dir: Path) -> dict[str, object]:
    (qmd_root / "home/.cache/qmd/index.sqlite").unlink(missing_ok=True)
    env = dict(os.environ, QMD_ROOT=str(qmd_root), CORPUS=str(corpus), GGUF_DIR=str(gguf_dir))
    t = time.perf_counter()
    p = subprocess.run(["bash", str(QMD_SH), "index"], env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"run_qmd.sh index failed (rc {p.returncode}):\n{p.stderr[-2000:]}")
    out: dict[str, object] = {"wall_s": wall}
    for key, pat in (("update_ms", r"update \(BM25 index\) took (\d+) ms"), ("embed_ms", r"embed took (\d+) ms"),
                     ("chunks", r"chunks\(vectors\): (\d+)"), ("documents", r"documents: (\d+)")):
        m = re.search(pat, p.stderr)
        if m:
            out[key] = int(m.group(1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qmd-root", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared/eval/obsidian-help/corpus/en")
    ap.add_argument("--gguf-dir", type=Path, default=Path.home() / ".cache/fanout/models")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--order", default="fanout,qmd", help="first round's order; later rounds alternate")
    args = ap.parse_args()
    corpus = args.corpus.resolve()
    order = args.order.split(",")
    rows = []
    with tempfile.TemporaryDirectory(prefix="index-vs-qmd-") as tmp:
        for rnd in range(args.rounds):
            res: dict[str, dict[str, object]] = {}
            for side in (order if rnd % 2 == 0 else order[::-1]):
                load = os.getloadavg()[0]
                res[side] = (run_fanout(corpus, Path(tmp)) if side == "fanout"
                             else run_qmd(corpus, args.qmd_root, args.gguf_dir))
                res[side]["load"] = round(load, 1)
                print(json.dumps({"round": rnd, "side": side, **res[side]}), file=sys.stderr, flush=True)
            rows.append(res)
    print("\n| round | fanout index s | qmd update+embed s (embed s) | qmd / fanout | load at start (fanout, qmd) |")
    print("|---|---|---|---|---|")
    for i, r in enumerate(rows):
        f, q = r["fanout"], r["qmd"]
        emb = f" ({int(q['embed_ms']) / 1000:.0f})" if "embed_ms" in q else ""
        print(f"| {i} | {float(f['wall_s']):.0f} | {float(q['wall_s']):.0f}{emb} | "
              f"{float(q['wall_s']) / float(f['wall_s']):.2f} | {f['load']}, {q['load']} |")
    f0, q0 = rows[0]["fanout"], rows[0]["qmd"]
    print(f"\nfanout: {f0.get('chunks', '?')} chunks from {f0.get('notes', '?')} notes; "
          f"qmd: {q0.get('chunks', '?')} chunks from {q0.get('documents', '?')} documents")


if __name__ == "__main__":
    main()
