"""Score calibration: does a `--min-score` threshold separate real matches from nonsense?

    .venv/bin/python -m bench.calibration [--db .fanout/bench-db] [--fit] [--out out/calibration.json]

Runs the judged benchmark queries (no agent fields: what `fanout query` sees) and the nonsense sets
(`bench/data/nonsense_{en,ru}.jsonl`, 30 each: 8 letter salads and 22 off-topic questions, written for this
check) through the pipeline once, then scores the top-1 page of every query three ways from the same hits:
- `returned`: the old normalisation (by the lists that returned something: a lone vector hit scores 1.0);
- `sent`: by every list the query was sent to;
- `calibrated`: `sent` times the query's evidence (best cosine / BM25 ramps, FuseConfig.cos_* / bm25_*),
  what `fuse_rrf` now returns.
For each: the top-1 score distributions of queries whose top-1 page is relevant vs nonsense queries, the
threshold that keeps 95% of the relevant top-1 pages (their 5th percentile), and the share of nonsense top-1
results it drops. `--fit` grid-searches the ramps on the English base set and the odd lines of the English
nonsense set only (English tricky, the other English nonsense lines and everything Russian stay held out) and
prints the best values for configs/local.yaml. Order within a query never changes: one factor per query.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("LANCEDB_LOG", "error")

from fanout.pipelines.fuse_rrf import evidence, list_weight, sent_lists
from fanout.pipelines.search import Searcher, SearchOptions

from fanout.config import FuseConfig, load_config
from fanout.evaluation.bench_data import load_queries
from fanout.exec.runner import Runner

DATA = Path(__file__).resolve().parent / "data"
KEEP = 0.95  # share of relevant top-1 pages a threshold must keep


def features(res, cfg) -> dict[str, dict]:
    """Per query: top-1 path and _rrf, best cosine / BM25 / alias hit, and both denominators, from the
    top-20 pages' explain lists and the variants table (rank-1 entries hold each list's best score)."""
    fc = cfg.fuse
    sent = sent_lists(res.variants, cfg.retrieve.lanes).to_pylist()
    den_sent: dict[str, float] = {}
    for s in sent:
        if s["lane"] != "alias":
            den_sent[s["qid"]] = den_sent.get(s["qid"], 0.0) + list_weight(s["kind"], s["lane"], fc) / (fc.k + 1)
    kinds = {(v["qid"], v["vid"]): v["kind"] for v in res.variants.to_pylist()}
    out: dict[str, dict] = {}
    for r in res.results.to_pylist():
        q = out.setdefault(r["qid"], {"top1": None, "rrf": 0.0, "cos": 0.0, "bm25": 0.0, "alias": False,
                                      "lists": {}})
        if r["rank"] == 1:
            q["top1"], q["rrf"], q["score"] = r["path"], r["_rrf"], r["score"]
        for lst in json.loads(r["_explain"])["lists"]:
            w = list_weight(kinds.get((r["qid"], lst["vid"]), lst["kind"]), lst["lane"], fc)
            q["lists"][(lst["vid"], lst["lane"])] = w
            if lst["rank"] != 1:
                continue
            if lst["lane"] == "vec" and lst["kind"] in ("orig", "vec"):
                q["cos"] = max(q["cos"], lst["score"])
            elif lst["lane"] == "fts":
                q["bm25"] = max(q["bm25"], lst["score"])
            elif lst["lane"] == "alias":
                q["alias"] = True
    for qid, q in out.items():
        alias_w = sum(w for (_, lane), w in q["lists"].items() if lane == "alias")
        q["den_returned"] = sum(q["lists"].values()) / (fc.k + 1) + fc.bonus_first
        q["den_sent"] = den_sent.get(qid, 0.0) + alias_w / (fc.k + 1) + fc.bonus_first
        del q["lists"]
    return out


def scores(q: dict, how: str, fc: FuseConfig) -> float:
    if how == "returned":
        return min(1.0, q["rrf"] / q["den_returned"])
    sent = min(1.0, q["rrf"] / q["den_sent"])
    return sent if how == "sent" else sent * evidence(q["cos"], q["bm25"], q["alias"], fc)


def separation(rel: list[float], junk: list[float]) -> tuple[float, float, float]:
    """(threshold keeping KEEP of `rel`, share of `rel` kept, share of `junk` dropped)."""
    if not rel:
        return 0.0, 0.0, 0.0
    thr = float(np.quantile(np.asarray(rel), 1 - KEEP, method="lower"))
    return thr, float(np.mean(np.asarray(rel) >= thr)), float(np.mean(np.asarray(junk) < thr)) if junk else 0.0


def pct(xs: list[float], p: float) -> str:
    return f"{np.quantile(np.asarray(xs), p):.3f}" if xs else "-"


def collect(args) -> dict:
    cfg = load_config(args.config)
    queries = load_queries(args.bench)
    rows: dict = {}
    with Runner(cfg) as runner:
        for lang in args.langs.split(","):
            s = Searcher(args.db, f"bench-{lang}", cfg, runner)
            judged = [q for q in queries if q["lang"] == lang]
            junk = [json.loads(x) for x in (DATA / f"nonsense_{lang}.jsonl").read_text().splitlines() if x]
            opts = SearchOptions(n=20, expand=False, rerank=False, explain=True)
            res = s.search([{"id": q["id"], "query": q["query"]} for q in judged + junk], opts)
            feats = features(res, s.cfg)
            for q in judged:
                f = feats.get(q["id"], {"top1": None})
                rows[q["id"]] = {**f, "lang": lang, "kind": "judged", "subset": q["subset"],
                                 "relevant": f["top1"] is not None and f["top1"] in set(q["relevant"])}
            for i, q in enumerate(junk):  # odd lines tune (with the base set), even lines are held out
                rows[q["id"]] = {**feats.get(q["id"], {"top1": None}), "lang": lang, "kind": "nonsense",
                                 "subset": "base" if i % 2 == 0 else "tricky"}
    return rows


def table(rows: dict, fc: FuseConfig) -> str:
    lines = [("| scoring | set | relevant top-1 (n) p5 / p25 / p50 | nonsense top-1 (n) p50 / p80 / p95 | "
              "threshold | relevant kept | nonsense dropped |"), "|---|---|---|---|---|---|---|"]
    for how in ("returned", "sent", "calibrated"):
        for name, keep in GROUPS:
            group = [r for r in rows.values() if keep(r)]
            if not group:
                continue
            rel = [scores(r, how, fc) for r in group if r["kind"] == "judged" and r.get("relevant")]
            junk = [scores(r, how, fc) if r.get("top1") else 0.0 for r in group if r["kind"] == "nonsense"]
            thr, kept, dropped = separation(rel, junk)
            lines.append(f"| {how} | {name} | ({len(rel)}) {pct(rel, .05)} / {pct(rel, .25)} / {pct(rel, .5)} | "
                         f"({len(junk)}) {pct(junk, .5)} / {pct(junk, .8)} / {pct(junk, .95)} | {thr:.3f} | "
                         f"{kept:.0%} | {dropped:.0%} |")
    return "\n".join(lines)


def tuned(r: dict) -> bool:
    """The rows the ramps were fitted on: English base set + half of the English nonsense set."""
    return r["lang"] == "en" and r["subset"] == "base"


GROUPS = (("en base + nonsense, odd lines (tuned)", tuned),
          ("en tricky + nonsense, even lines (held out)", lambda r: r["lang"] == "en" and r["subset"] == "tricky"),
          ("ru base + tricky + nonsense (held out)", lambda r: r["lang"] == "ru"),
          ("all", lambda r: True))


def fit(rows: dict, fc: FuseConfig) -> FuseConfig:
    """Grid search of the ramps on the tuned rows: most nonsense dropped at 95% relevant kept."""
    en = [r for r in rows.values() if tuned(r)]
    best, best_cfg = (-1.0, 0.0), fc
    for cf in np.arange(0.20, 0.50, 0.02):
        for cw in np.arange(0.05, 0.45, 0.05):
            for bf in (0.0, 2.0, 4.0, 6.0, 8.0):
                for bw in (4.0, 8.0, 12.0, 16.0, 24.0):
                    c = dataclasses.replace(fc, cos_floor=round(float(cf), 2), cos_full=round(float(cf + cw), 2),
                                            bm25_floor=bf, bm25_full=bf + bw)
                    rel = [scores(r, "calibrated", c) for r in en if r["kind"] == "judged" and r.get("relevant")]
                    junk = [scores(r, "calibrated", c) if r.get("top1") else 0.0 for r in en
                            if r["kind"] == "nonsense"]
                    thr, _, dropped = separation(rel, junk)
                    key = (dropped, thr)  # most dropped; then the higher threshold (more room)
                    if key > best:
                        best, best_cfg = key, c
    return best_cfg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=".fanout/bench-db")
    ap.add_argument("--bench", default=None)
    ap.add_argument("--config", default=None)
    ap.add_argument("--langs", default="en,ru")
    ap.add_argument("--fit", action="store_true", help="grid-search the ramps on the English sets")
    ap.add_argument("--rows", default=None, help="reuse rows saved by --out instead of searching again")
    ap.add_argument("--out", default=None, help="save the per-query rows (JSON) for --rows")
    args = ap.parse_args()
    rows = json.loads(Path(args.rows).read_text()) if args.rows else collect(args)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, ensure_ascii=False, indent=1))
    fc = load_config(args.config).fuse
    if not args.rows:  # the rows' scores came from this config: the offline recomputation must match them
        dev = max((abs(scores(r, "calibrated", fc) - r["score"]) for r in rows.values() if r.get("top1")),
                  default=0)
        print(f"check: recomputed calibrated top-1 scores match the pipeline's to {dev:.4f} (4 places)")
    if args.fit:
        fc = fit(rows, fc)
        print(f"fitted on en base + odd nonsense lines: cos_floor {fc.cos_floor} cos_full {fc.cos_full} bm25_floor {fc.bm25_floor} "
              f"bm25_full {fc.bm25_full}\n")
    print(f"ramps: cosine {fc.cos_floor} -> {fc.cos_full}, BM25 {fc.bm25_floor} -> {fc.bm25_full}\n")
    print(table(rows, fc))
    judged = [r for r in rows.values() if r["kind"] == "judged"]
    print(f"\njudged queries: {len(judged)}, top-1 relevant: {sum(bool(r.get('relevant')) for r in judged)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
