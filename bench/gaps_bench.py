"""`fanout gaps` on the benchmark: do the questions whose pages were removed, and the nonsense ones, land in
the flagged groups, and the rest not?

    .venv/bin/python -m bench.gaps_bench --src-db /work/bench-db [--collection bench-en] [--lang en]
                                         [--bench DIR] [--out out/gaps-bench] [--config local]

1. Copies the collection's Lance tables, caches and manifest from `--src-db` into a fresh `OUT/db` (the source
   is never written) and the corpus minus REMOVED into `OUT/vault` (under out/: never committed).
2. `fanout batch` of every judged query of that language plus `bench/data/nonsense_<lang>.jsonl` (no agent
   fields: what a site-search log holds) on the whole index: the previous night's answers.
3. `fanout index OUT/vault --db OUT/db`: incremental, so the removed pages' rows are deleted and nothing is
   embedded (every other page's content hash is unchanged); the same batch again.
4. `fanout gaps` on the second answers, once on scores alone and once with `--previous` the first answers.
   Expected flagged: the queries all of whose relevant pages were removed, and the nonsense ones; prints, per
   mode, precision and recall of "flagged" (lost, unanswered or weakly answered) against that, per band, and
   the misses.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LANCEDB_LOG", "error")

# Pages each answering 1-4 English queries and no other query's relevant or partial page (Tags view is only a
# partial page of the Tags queries); 25 English queries lose every relevant page. Other languages:
# choose_removed (the same rule, automated).
REMOVED = {
    "en": ["Editing and formatting/Callouts.md", "Editing and formatting/Tags.md", "Plugins/Tags view.md",
           "Plugins/Graph view.md", "Plugins/File recovery.md", "Plugins/Canvas.md",
           "Linking notes and files/Aliases.md", "Plugins/Workspaces.md", "Plugins/Bookmarks.md",
           "Licenses and payment/Refund policy.md", "Plugins/Slides.md", "Plugins/Word count.md",
           "Plugins/Audio recorder.md"],
}


def choose_removed(judged: list[dict], want: int = 25) -> list[str]:
    """For a language without a hand-picked list: pages that are no query's partial page, most-asked first,
    until `want` queries have lost every relevant page; then the partial pages of those queries that no
    other query needs. Deterministic (ties by path)."""
    rel: dict[str, set[str]] = {}
    used: dict[str, set[str]] = {}  # page -> queries that name it relevant or partial
    for q in judged:
        for p in q["relevant"]:
            rel.setdefault(p, set()).add(q["id"])
        for p in [*q["relevant"], *(q.get("partial") or [])]:
            used.setdefault(p, set()).add(q["id"])
    clean = [p for p in rel if used[p] == rel[p]]
    removed: list[str] = []
    for p in sorted(clean, key=lambda p: (-len(rel[p]), p)):
        removed.append(p)
        if sum(set(q["relevant"]) <= set(removed) for q in judged) >= want:
            break
    lost = {q["id"] for q in judged if set(q["relevant"]) <= set(removed)}
    removed += sorted({p for q in judged if q["id"] in lost for p in q.get("partial") or []
                       if used[p] <= lost and p not in removed})
    return removed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src-db", required=True, help="a benchmark index (read only)")
    ap.add_argument("--collection", default="bench-en")
    ap.add_argument("--lang", default="en", choices=["en", "ru"])
    ap.add_argument("--bench", default=None, help="the benchmark folder (default: $FANOUT_BENCH or "
                    "<repo>/../shared/eval/obsidian-help)")
    ap.add_argument("--out", default="out/gaps-bench")
    ap.add_argument("--config", default=None, help="profile (default: local)")
    a = ap.parse_args()

    from fanout.cli.main import main as cli
    from fanout.evaluation.bench_data import resolve_bench_dir

    a.bench = str(resolve_bench_dir(a.bench))

    out, src, c = Path(a.out).resolve(), Path(a.src_db), a.collection
    db, vault = out / "db", out / "vault"
    judged = [json.loads(x) for x in (Path(a.bench) / "queries" / "obsidian-help.jsonl").open(encoding="utf-8")]
    judged = [q for q in judged if q["lang"] == a.lang]
    removed = REMOVED.get(a.lang) or choose_removed(judged)
    print(f"removed pages ({len(removed)}): {removed}", file=sys.stderr)
    cfg = ["--config", a.config] if a.config else []
    if db.exists():  # a fresh copy each run: the "previous" answers come from the index before the removal
        shutil.rmtree(db)
    db.mkdir(parents=True)
    for p in src.iterdir():
        if p.name.startswith(f"{c}_") or p.name == f"{c}.manifest.json":
            (shutil.copytree if p.is_dir() else shutil.copy2)(p, db / p.name)
    nonsense = [json.loads(x) for x in (ROOT / "bench" / "data" / f"nonsense_{a.lang}.jsonl").open(encoding="utf-8")]
    rows = [{"id": q["id"], "query": q["query"]} for q in judged] + [{"id": q["id"], "query": q["query"]}
                                                                     for q in nonsense]
    qfile = out / f"queries-{a.lang}.jsonl"
    qfile.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")

    def batch(answers: Path, when: str) -> None:
        t = time.perf_counter()
        rc = cli(["batch", str(qfile), "--out", str(answers), "--db", str(db), "-c", c, "--runner", "inproc", *cfg])
        print(f"batch {when}: rc {rc}, {time.perf_counter() - t:.1f}s", file=sys.stderr)

    previous = out / f"answers-before-{a.lang}.parquet"
    batch(previous, "before the removal (the previous night)")
    if vault.exists():
        shutil.rmtree(vault)
    shutil.copytree(Path(a.bench) / "corpus" / a.lang, vault)
    for rel in removed:
        (vault / rel).unlink()
    t = time.perf_counter()
    rc = cli(["index", str(vault), "--db", str(db), "-c", c, "--runner", "inproc", *cfg])
    print(f"index (incremental, {len(removed)} pages removed): rc {rc}, {time.perf_counter() - t:.1f}s",
          file=sys.stderr)
    answers = out / f"answers-{a.lang}.parquet"
    batch(answers, "after the removal")

    gone = set(removed)
    lost = {q["id"] for q in judged if set(q["relevant"]) <= gone}
    noise = {q["id"] for q in nonsense}
    expected = lost | noise
    best = {}
    for r in pq.read_table(answers).to_pylist():
        if r["rank"] == 1:
            best[r["qid"]] = (r["score"], r["path"])
    text = {r["id"]: r["query"] for r in rows}
    print(f"\n{a.lang}: {len(rows)} queries ({len(judged)} judged, {len(noise)} nonsense); removed {len(removed)} "
          f"pages -> {len(lost)} judged queries lost every relevant page")
    for mode, extra in (("scores only", []), ("with --previous (the answers before the removal)",
                                              ["--previous", str(previous)])):
        report = out / (f"report-{a.lang}" + ("-previous" if extra else ""))
        t = time.perf_counter()
        rc = cli(["gaps", str(answers), "--db", str(db), "-c", c, "--out", str(report), *extra, *cfg])
        print(f"gaps ({mode}): rc {rc}, {time.perf_counter() - t:.1f}s", file=sys.stderr)
        flagged = {r["qid"]: r for r in pq.read_table(report / "flagged.parquet").to_pylist()}
        hit = expected & set(flagged)
        prec = len(hit) / max(len(flagged), 1)
        rec = len(hit) / max(len(expected), 1)
        print(f"\n### {mode}\n")
        print("| set | expected flagged | flagged | of them lost / unanswered / weak | recall |")
        print("|---|---|---|---|---|")

        def bands(ids: set[str], flagged: dict = flagged) -> str:
            return " / ".join(str(sum(flagged[q]["band"] == b for q in ids)) for b in ("lost", "unanswered", "weak"))

        for name, ids in (("queries whose pages were removed", lost), ("nonsense", noise)):
            got = ids & set(flagged)
            print(f"| {name} | {len(ids)} | {len(got)} | {bands(got)} | {len(got) / max(len(ids), 1):.3f} |")
        rest = {q["id"] for q in judged} - lost
        fp = rest & set(flagged)
        print(f"| the other judged queries | 0 | {len(fp)} | {bands(fp)} | - |")
        print(f"\nprecision {prec:.3f} ({len(hit)}/{len(flagged)}), recall {rec:.3f} ({len(hit)}/{len(expected)})")
        print("\nmissed (expected, not flagged):")
        for q in sorted(expected - set(flagged)):
            s_, p_ = best.get(q, (None, None))
            print(f"  {q} {s_} {p_} | {text[q]}")
        print("flagged, not expected:")
        for q in sorted(fp):
            print(f"  {q} {flagged[q]['band']} {flagged[q]['score']:.3f} {best.get(q, (0, ''))[1]} | {text[q]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
