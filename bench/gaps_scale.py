"""`fanout gaps` at scale: a synthetic answers file of N rows, streamed; wall time and peak memory.

    .venv/bin/python -m bench.gaps_scale [--rows 1000000] [--per-query 5] [--distinct 5000]
                                        [--formats parquet,csv,jsonl] [--out out/gaps-scale]

Builds a 6-note index with the fake profile (configs/fake.yaml: hashed bag-of-words vectors, so the cost
measured is reading, aggregating, clustering and writing, not a model), writes an answers file in `fanout
batch`'s output format (`--per-query` result rows per query, the index's own stamp on every row) whose
queries are drawn from `--distinct` texts per band (unanswered, weak) plus answered ones, with repeats (a
Zipf-like draw) and 0.1% error rows, then runs `fanout gaps` on it in a child process per format and prints
one table: rows, queries, distinct flagged texts, groups, seconds, peak RSS of the child (ru_maxrss), and
the same child's RSS on a 100-row file (imports and models: the floor).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LANCEDB_LOG", "error")

NOTES = {
    "Sync.md": "# Sync\n\nSync keeps your vault the same on every device.\n",
    "Backups.md": "# Backups\n\nCopy the vault folder to another disk.\n",
    "Plugins.md": "# Plugins\n\nInstall community plugins and enable them.\n",
    "Themes.md": "# Themes\n\nDark theme, light theme.\n",
    "Hotkeys.md": "# Hotkeys\n\nAssign keyboard shortcuts to commands.\n",
    "Синхронизация.md": "# Синхронизация\n\nСинхронизация хранилища на всех устройствах.\n",
}
TOPICS = ["billing invoice refund", "docx word export", "jira ticket integration", "calendar meeting invite",
          "team sharing permissions", "offline android crash", "pdf print margins", "spell check language",
          "возврат денег подписка", "совместная работа команда", "экспорт в word", "ошибка запуска android"]
WORDS = ["how", "to", "why", "my", "can", "i", "the", "fix", "set", "up", "change", "where", "is", "help",
         "как", "почему", "где", "мой", "настроить"]
FLAT_FIELDS = ["qid", "rank", "path", "title", "heading", "snippet", "score", "field", "error", "query", "index"]


def build_index(work: Path) -> tuple[Path, str]:
    from fanout.cli.main import main
    from fanout.store.db import Collection, index_stamp

    vault = work / "vault"
    for rel, text in NOTES.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    db = work / "db"
    if main(["index", str(vault), "--db", str(db), "-c", "kb", "--config", "fake", "--runner", "inproc"]) != 0:
        raise SystemExit("index failed")
    return db, index_stamp("kb", Collection(str(db), "kb").require())


def texts(distinct: int, rng: np.random.Generator) -> dict[str, list[str]]:
    """Per band, `distinct` texts: a topic's words shuffled with filler words (answered: the notes' topics)."""
    out: dict[str, list[str]] = {}
    answered = [t.split("\n\n")[1].rstrip(".\n") for t in NOTES.values()]
    for band, pool in (("unanswered", TOPICS[: len(TOPICS) // 2 + 2]), ("weak", TOPICS[len(TOPICS) // 2 - 2:]),
                       ("answered", answered)):
        seen: set[str] = set()
        while len(seen) < distinct:
            base = pool[int(rng.integers(len(pool)))].split()
            words = base + list(rng.choice(WORDS, size=int(rng.integers(1, 5))))
            rng.shuffle(words)
            seen.add(" ".join(words) + f" {int(rng.integers(10**6))}" * (len(seen) % 3 == 0))
        out[band] = sorted(seen)
    return out


def write_answers(path: Path, rows: int, per_query: int, distinct: int, stamp: str, seed: int = 0) -> int:
    """Stream a parquet answers file of `rows` rows; returns queries written."""
    rng = np.random.default_rng(seed)
    pool = texts(distinct, rng)
    band_score = {"unanswered": (0.0, 0.69), "weak": (0.70, 0.83), "answered": (0.84, 1.0)}
    bands = np.array(["answered", "unanswered", "weak"])
    writer = None
    n_queries = rows // per_query
    step = 20_000  # queries per written block
    paths = list(NOTES)
    for start in range(0, n_queries, step):
        n = min(step, n_queries - start)
        which = bands[rng.choice(3, size=n, p=[0.6, 0.25, 0.15])]
        ranks = rng.zipf(1.3, size=n) - 1  # a few texts asked very often, most rarely
        cols: dict[str, list] = {k: [] for k in FLAT_FIELDS}
        for i in range(n):
            qid = f"q{start + i}"
            band = which[i]
            text = pool[band][int(ranks[i]) % distinct]
            if (start + i) % 1000 == 999:  # an error row
                for k, v in zip(FLAT_FIELDS, [qid, None, None, None, None, None, None, "query",
                                              "`query` is empty", text, stamp]):
                    cols[k].append(v)
                continue
            lo, hi = band_score[band]
            best = float(rng.uniform(lo, hi))
            for r in range(per_query):
                for k, v in zip(FLAT_FIELDS, [qid, r + 1, paths[r % len(paths)], paths[r % len(paths)][:-3], "",
                                              "snippet", best * (1 - 0.05 * r), None, None, text, stamp]):
                    cols[k].append(v)
        from fanout.io.batch_output import FLAT

        t = pa.table(cols, schema=FLAT)
        writer = writer or pq.ParquetWriter(path, FLAT)
        writer.write_table(t)
    writer.close()
    return n_queries


def convert(src: Path, ext: str) -> Path:
    """The same answers as CSV or JSONL (batch output's other formats), streamed."""
    dst = src.with_suffix(f".{ext}")
    pf = pq.ParquetFile(src)
    if ext == "csv":
        with pcsv.CSVWriter(dst, pf.schema_arrow) as w:
            for b in pf.iter_batches(65536):
                w.write_batch(b)
        return dst
    with dst.open("w", encoding="utf-8") as f:
        cur, q = None, None
        for b in pf.iter_batches(65536):
            for r in b.to_pylist():
                if r["qid"] != cur:
                    if q is not None:
                        f.write(json.dumps(q, ensure_ascii=False) + "\n")
                    cur = r["qid"]
                    q = {"id": r["qid"], "query": r["query"], "index": r["index"], "results": []}
                    if r["error"]:
                        q.update(error=r["error"], field=r["field"])
                if r["rank"] is not None:
                    q["results"].append({k: r[k] for k in ("rank", "path", "title", "heading", "snippet", "score")})
        if q is not None:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    return dst


def run_gaps(answers: Path, db: Path, out: Path) -> tuple[float, int, str]:
    """`fanout gaps` in a child: (seconds, peak RSS bytes of that child, its summary line)."""
    code = ("import resource, sys; from fanout.cli.main import main; rc = main(sys.argv[1:]); "
            "print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, "gaps", str(answers), "--db", str(db), "-c", "kb",
                        "--config", "fake", "--out", str(out)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    secs = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"fanout gaps failed on {answers}:\n{p.stderr[-3000:]}")
    rss = int(next(ln.split()[1] for ln in p.stderr.splitlines() if ln.startswith("maxrss"))) * 1024
    return secs, rss, p.stdout.splitlines()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--per-query", type=int, default=5, help="result rows per query")
    ap.add_argument("--distinct", type=int, default=2500, help="distinct texts per band")
    ap.add_argument("--formats", default="parquet,csv,jsonl")
    ap.add_argument("--out", default="out/gaps-scale")
    a = ap.parse_args()
    work = Path(a.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    db, stamp = build_index(work)
    src = work / "answers.parquet"
    t = time.perf_counter()
    queries = write_answers(src, a.rows, a.per_query, a.distinct, stamp)
    print(f"wrote {a.rows} rows ({queries} queries) in {time.perf_counter() - t:.1f}s: {src}", file=sys.stderr)
    tiny = work / "tiny.parquet"
    write_answers(tiny, 100, a.per_query, 20, stamp)
    floor = run_gaps(tiny, db, work / "report-tiny")
    print("| format | rows | queries | file MB | seconds | peak RSS MB | RSS MB, 100-row file | what gaps said |")
    print("|---|---|---|---|---|---|---|---|")
    for ext in a.formats.split(","):
        f = src if ext == "parquet" else convert(src, ext)
        secs, rss, said = run_gaps(f, db, work / f"report-{ext}")
        print(f"| {ext} | {a.rows} | {queries} | {f.stat().st_size / 2**20:.0f} | {secs:.1f} | {rss / 2**20:.0f} | "
              f"{floor[1] / 2**20:.0f} | {said} |", flush=True)
    print(f"(driver RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
