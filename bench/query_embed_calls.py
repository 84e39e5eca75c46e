"""A search's query texts embedded one per embed() call against packed (`embedder.query_batch_size`): texts per
second and CPU per text with the profile's real embedder, the two ways taking turns; prints one table.

    .venv/bin/python -m bench.query_embed_calls [--config local] [--texts 96] [--rounds 3]
                                                            [--packed 8]

The texts are the bundled sample queries' query, rephrased_query and expected_answer, with the embedder's query
prompt, repeated up to `--texts`. One text a call makes a query's vectors independent of which other texts share
its call (llama.cpp's sums follow the decode's shape); packing is what the default does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="local")
    ap.add_argument("--texts", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--packed", type=int, default=8, help="texts per call of the packed way")
    args = ap.parse_args(argv)
    from fanout.actors.embedder import Embedder, format_prompt

    from fanout.config import load_config

    cfg = load_config(args.config)
    emb = Embedder(cfg)
    rows = [json.loads(x) for x in (ROOT / "samples" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
            if x.strip()]
    texts = [format_prompt(cfg.models.embed_prompt, "query", r[f]) for r in rows
             for f in ("query", "rephrased_query", "expected_answer") if r.get(f)]
    texts = (texts * (args.texts // max(len(texts), 1) + 1))[:args.texts]
    emb.embed_texts(texts[:args.packed], args.packed)  # warm-up
    runs: dict[int, list[tuple[float, float]]] = {1: [], args.packed: []}
    for _ in range(args.rounds):
        for per_call, got in runs.items():
            t, c = time.perf_counter(), time.process_time()
            emb.embed_texts(texts, per_call)
            got.append((len(texts) / (time.perf_counter() - t), (time.process_time() - c) / len(texts)))
    print(f"\n{args.config}: {len(texts)} query texts, {cfg.embedder.n_threads} threads, median of {args.rounds}\n")
    print("| texts per embed() call | texts/s | CPU ms a text |")
    print("|---|---|---|")
    for per_call, xs in runs.items():
        print(f"| {per_call} | {statistics.median(x[0] for x in xs):.1f} | "
              f"{1000 * statistics.median(x[1] for x in xs):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
