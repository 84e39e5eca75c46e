"""Index speed: `fanout index` vs raw llama.cpp embedding of the same texts, and an unchanged re-index.

    .venv/bin/python -m bench.index_speed [--vault DIR] [--notes 40] [--full-db .fanout/bench-db]

Prints one table. Both sides embed the same chunk texts (breadcrumb + document prompt) with the same model,
n_ctx/n_batch, batch size and threads, in the same process, one after the other.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LANCEDB_LOG", "error")

from fanout.actors._llama import load_llama, model_path
from fanout.actors.embedder import format_prompt
from fanout.pipelines.chunk_notes import chunk_notes
from fanout.pipelines.index import index_vault
from fanout.pipelines.scan_notes import list_markdown, scan_notes

from fanout.config import load_config
from fanout.evaluation.bench_data import corpus_dir
from fanout.exec.runner import Runner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--vault", default=None, help="default: the benchmark's English corpus")
    ap.add_argument("--notes", type=int, default=40, help="notes embedded by both sides (0 = all)")
    ap.add_argument("--full-db", default=".fanout/bench-db", help="a full index to re-index unchanged")
    ap.add_argument("--collection", default="bench-en")
    args = ap.parse_args()
    cfg = load_config()
    vault = Path(args.vault) if args.vault else corpus_dir(None, "en")
    files = list_markdown(vault)[: args.notes or None]
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "vault"
        for f in files:
            dst = sub / f.relative_to(vault)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, dst)
        notes, _ = scan_notes(sub)
        chunks = chunk_notes(notes, cfg.chunk)
        prompts = [format_prompt(cfg.models.embed_prompt, "document", t, ti)
                   for t, ti in zip(chunks["embed_text"].to_pylist(), chunks["title"].to_pylist())]
        ec = cfg.embedder
        llm = load_llama(model_path(cfg, "embedder"), ec, embedding=True, n_batch=ec.n_ctx, n_ubatch=ec.n_ctx)
        tokens = sum(min(ec.n_ctx, len(llm.tokenize(p.encode(), add_bos=True))) for p in prompts)
        order = sorted(range(len(prompts)), key=lambda i: len(chunks["embed_text"][i].as_py()))
        texts = [prompts[i] for i in order]
        t = time.perf_counter()
        for i in range(0, len(texts), ec.batch_size):
            llm.embed(texts[i:i + ec.batch_size], normalize=False, truncate=True)
        raw = time.perf_counter() - t
        del llm
        with Runner(cfg) as runner:
            runner.actor("embedder")  # model load is not embedding time (the raw side loaded it too)
            t = time.perf_counter()
            s = index_vault(sub, Path(tmp) / "db", "b", cfg, runner)
            ours = time.perf_counter() - t
            t = time.perf_counter()
            again = index_vault(sub, Path(tmp) / "db", "b", cfg, runner)
            re_small = time.perf_counter() - t
            re_full, full_notes = None, 0
            if Path(args.full_db).exists():
                t = time.perf_counter()
                rs = index_vault(vault, args.full_db, args.collection, cfg, runner)
                re_full, full_notes = time.perf_counter() - t, rs.notes
                assert rs.embedded_chunks == 0, "the full index was not up to date: this run embedded chunks"
    n = chunks.num_rows
    print(f"\n{len(files)} notes, {n} chunks, {tokens} tokens, {ec.n_threads} threads, n_ctx {ec.n_ctx}\n")
    print("| run | seconds | chunks/s | tokens/s | vs raw |\n|---|---|---|---|---|")
    print(f"| raw llama.cpp embed (same texts) | {raw:.1f} | {n / raw:.2f} | {tokens / raw:.0f} | 1.00 |")
    print(f"| fanout index (scan+chunk+embed+write+FTS) | {ours:.1f} | {n / ours:.2f} | {tokens / ours:.0f} | "
          f"{raw / ours:.2f} |")
    print(f"| fanout index, embed stage only | {s.embed_seconds:.1f} | {n / s.embed_seconds:.2f} | "
          f"{tokens / s.embed_seconds:.0f} | {raw / s.embed_seconds:.2f} |")
    print(f"| unchanged re-index ({len(files)} notes) | {re_small:.2f} | | | embedded {again.embedded_chunks} |")
    if re_full is not None:
        print(f"| unchanged re-index ({full_notes} notes, {args.full_db}) | {re_full:.2f} | | | goal <= 2 s |")


if __name__ == "__main__":
    main()
