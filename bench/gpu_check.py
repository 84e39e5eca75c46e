"""The model roles' throughput with n_gpu_layers 0 against -1 in one process, one table (run by gpu_check.sh).

    python -m bench.gpu_check [--seconds 20] [--devices cpu,gpu] [--models embedder=P,expander=P,reranker=P]
                              [--roles embed,qembed,expand,rerank] [--instances 2,4,8] [...]

Rows: embedding (32 chunks of ~250 tokens per call), the 1.5B expander (one query per call, each query new;
the shared prefix, system prompt and titles as the local-1.5b profile has them, is reused as in a batch) and
rerank of 40 passages for one query; `--roles qembed` adds query vectors (3 short texts per query) and
`--embed-batches` the embedder at other decode sizes, `--instances 2,4` every row again with N models in one
process and N threads calling at once (a Ray Data actor with `instances: N`; on the CPU each model gets cores / N
threads). Each row runs for --seconds after one warm-up call (per thread).
Besides the rate per call, llama.cpp's own counters give prompt (batch) and generation tokens per second and
tokens per call: with --models pointing at synthetic weights (bench/gguf_skeleton.py) generation runs to
max_tokens, so --expander-max-tokens caps it near the real model's length. CPU rows use every core of the
node (n_threads = cores), GPU rows offload every layer (actors/_llama.py check_gpu_offload refuses when no
GPU backend loaded) and read the GPU memory in use (nvidia-smi): evidence that the weights are there. At the
end the same weights' embeddings and rerank scores are compared, CPU against GPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
from fanout.actors._llama import backend_info, load_backends

from fanout.config import load_config

TEXT = ("Sync keeps your notes up to date across devices. Open Settings, choose Sync, sign in and pick a remote "
        "vault; conflicts are merged per file and the version history keeps deleted notes for a year. ") * 6
VECTORS: dict[str, object] = {}  # device -> two embeddings, compared CPU vs GPU at the end
SCORES: dict[str, list] = {}  # device -> eight rerank scores
TITLES = [p.stem for p in sorted((Path(__file__).resolve().parent.parent / "samples" / "vault").rglob("*.md"))]


def gpu_mem_mib() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             check=False, capture_output=True, text=True, timeout=20).stdout.strip()
        return f"{out} MiB"
    except (OSError, subprocess.SubprocessError):
        return "n/a"


def perf(llm):
    import llama_cpp

    return llama_cpp.llama_perf_context(llm._ctx.ctx)


def instances(cls, cfg, n: int):
    """`n` instances of a model role in this process, as a Ray Data actor with `instances: n` holds them
    (fanout/exec/runner.py Instances): each call takes one no other call holds. All `n` built here, before timing
    (the pipeline builds them as calls first find every built one busy)."""
    from fanout.exec.runner import Instances

    pool = type(cls.__name__, (Instances,), {"stage": cls, "n": n})(cfg=cfg)
    held = [pool._take() for _ in range(n)]  # taking n at once builds the other n - 1
    for inst in held:
        pool.free.put(inst)
    return pool, held[0]


def timed(label: str, device: str, llm, call, unit: str, seconds: float, rows: list[dict], n: int = 1) -> None:
    """Run call() (returns units done) for `seconds` after one warm-up; record rates and token counters.
    With `n` > 1: n threads call it at once (one per model instance), the rate is theirs together."""
    import llama_cpp

    if n > 1:
        return timed_threads(label, device, call, unit, seconds, rows, n)
    call()
    if llm is not None:  # None: the call decodes in a context of its own (rerank.parallel), no counters
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    t0, n, calls = time.perf_counter(), 0, 0
    while time.perf_counter() - t0 < seconds:
        n += call()
        calls += 1
    wall = time.perf_counter() - t0
    p = perf(llm) if llm is not None else None
    rows.append({"row": label, "device": device, "rate": n / wall, "unit": unit, "calls": calls,
                 "pp_tps": p.n_p_eval / (p.t_p_eval_ms / 1e3) if p and p.t_p_eval_ms else 0.0,
                 "tg_tps": p.n_eval / (p.t_eval_ms / 1e3) if p and p.t_eval_ms else 0.0,
                 "pp_per_call": p.n_p_eval / max(calls, 1) if p else 0.0,
                 "tg_per_call": p.n_eval / max(calls, 1) if p else 0.0,
                 "gpu_mem": gpu_mem_mib() if device == "GPU" else ""})
    r = rows[-1]
    print(f"  {label} [{device}]: {r['rate']:.2f} {unit} ({calls} calls in {wall:.1f} s; prompt "
          f"{r['pp_tps']:.0f} tok/s, generation {r['tg_tps']:.1f} tok/s; GPU memory {r['gpu_mem'] or '-'})",
          flush=True)


def timed_threads(label: str, device: str, call, unit: str, seconds: float, rows: list[dict], n: int) -> None:
    import threading

    done, lock, t0 = [0, 0], threading.Lock(), [0.0]
    go = threading.Barrier(n + 1, action=lambda: t0.__setitem__(0, time.perf_counter()))  # set before any goes

    def work() -> None:
        call()  # warm-up: each instance's first call
        go.wait()
        while time.perf_counter() - t0[0] < seconds:
            k = call()
            with lock:
                done[0] += k
                done[1] += 1

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    go.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0[0]
    rows.append({"row": label, "device": device, "rate": done[0] / wall, "unit": unit, "calls": done[1],
                 "pp_tps": 0.0, "tg_tps": 0.0, "pp_per_call": 0.0, "tg_per_call": 0.0,
                 "gpu_mem": gpu_mem_mib() if device == "GPU" else ""})
    print(f"  {label} [{device}]: {done[0] / wall:.2f} {unit} ({done[1]} calls in {wall:.1f} s by {n} threads; "
          f"GPU memory {rows[-1]['gpu_mem'] or '-'})", flush=True)


def tag(label: str, n: int) -> str:
    return label if n == 1 else f"{label}, {n} instances in one process"


def embed_rows(cfg, device: str, seconds: float, rows: list[dict], label: str = "embed, 32 chunks per call",
               n: int = 1) -> None:
    from fanout.actors.embedder import Embedder

    emb, first = instances(Embedder, cfg, n)
    VECTORS.setdefault(device, first.embed_texts([TEXT, "restore a deleted note"]))  # same weights, both devices
    k = max(32, cfg.embedder.batch_size)  # at least one full embed() call
    chunks = pa.table({"text": [TEXT] * k, "role": ["document"] * k})
    timed(tag(label, n), device, first.llm, lambda: (emb(chunks), k)[1], "chunks/s", seconds, rows, n)


def query_embed_rows(cfg, device: str, seconds: float, rows: list[dict], n: int = 1) -> None:
    """What a batch search with an agent's fields asks of the embedder: 3 short texts per query, 16 queries."""
    from fanout.actors.embedder import Embedder

    emb, first = instances(Embedder, cfg, n)
    seq = iter(range(10**9))

    def sixteen() -> int:
        i = next(seq)
        texts = [f"{w} {i}-{j}" for j in range(16) for w in (
            "how do I restore a deleted note", "restore deleted notes from file recovery",
            "Open Settings, File recovery, and pick the snapshot of the note to restore.")]
        emb(pa.table({"text": texts, "role": ["query"] * len(texts)}))
        return 16

    nb, _ = cfg.embedder.batch_tokens
    timed(tag(f"query vectors, 3 per query (n_batch {nb}, {cfg.embedder.batch_size} texts per embed() call)", n),
          device, first.llm, sixteen, "queries/s", seconds, rows, n)


def expand_rows(cfg, device: str, seconds: float, rows: list[dict], n: int = 1) -> None:
    from fanout.actors.expander import QueryExpander

    exp, first = instances(QueryExpander, cfg, n)
    seq = iter(range(10**9))

    def one() -> int:  # a new query each call: the shared prefix (system prompt, titles) is reused, as in a batch
        i = next(seq)
        exp(pa.table({"qid": [f"q{i}"], "query": [f"how do I restore a deleted note, case {i}"],
                      "kb_lang": ["en"], "titles": [TITLES]}))
        return 1

    timed(tag("1.5B expander, one query per call", n), device, first.llm, one, "queries/s", seconds, rows, n)


def rerank_rows(cfg, device: str, seconds: float, rows: list[dict], n: int = 1) -> None:
    from fanout.actors.reranker import Reranker

    rr, first = instances(Reranker, cfg, n)
    seq = iter(range(10**9))
    par = cfg.rerank.parallel
    SCORES[device if par == 1 else f"{device}, {par} in parallel"] = first(pa.table({
        "query": ["restore a deleted note"] * 8,
        "passage": [f"{TEXT[:300]} ({j})" for j in range(8)]})).column("_rerank").to_pylist()

    def forty() -> int:
        i = next(seq)
        rr(pa.table({"query": [f"restore a deleted note {i}"] * 40,
                     "passage": [f"{TEXT[:400]} ({j})" for j in range(40)]}))
        return 40

    label = "rerank, top 40 of one query per call" + (f", {par} passages per decode" if par > 1 else "")
    timed(tag(label, n), device, first.llm if par == 1 else None, forty, "pairs/s", seconds, rows, n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--devices", default="cpu,gpu", help="cpu,gpu (default) or one of them")
    ap.add_argument("--models", default="", help="role=path,...: GGUF files instead of the profile's")
    ap.add_argument("--profile", default="local-1.5b")
    ap.add_argument("--roles", default="embed,expand,rerank",
                    help="which rows: embed, qembed (short query texts), expand, rerank (default embed,expand,rerank)")
    ap.add_argument("--embed-batches", default="",
                    help="N:B,... extra embedding rows with n_ctx = n_batch = N tokens per decode and B texts per "
                         "embed() call (the local profile: 512:8); how a GPU wants the embedder configured")
    ap.add_argument("--rerank-parallel", default="", help="N,...: extra rerank rows with rerank.parallel = N")
    ap.add_argument("--instances", default="",
                    help="N,...: every row again with N model instances in one process, N threads calling at once "
                         "(a Ray Data actor with `instances: N`); CPU rows split the cores among them")
    ap.add_argument("--expander-max-tokens", type=int, default=0,
                    help="cap generation (synthetic weights never stop early: the real 1.5B writes ~53 (en) / ~70 "
                         "(ru) tokens per query, the bench index's 236 cached expansions)")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="folder for gpu_check.md (default $OUT)")
    args = ap.parse_args()

    load_backends()
    import llama_cpp

    info = backend_info()
    print(f"GPU offload supported: {llama_cpp.llama_supports_gpu_offload()} | CPU variant: {info.get('variant')}"
          f" | cores: {os.cpu_count()}", flush=True)
    base = load_config(args.profile)
    models = dict(kv.split("=", 1) for kv in args.models.split(",") if kv)
    if models:
        base = base.replace(models=models)
    if args.expander_max_tokens:
        base = base.replace(expand={"max_tokens": args.expander_max_tokens})
    threads = os.cpu_count() or 1
    rows: list[dict] = []
    for device in [d.strip().upper() for d in args.devices.split(",") if d.strip()]:
        layers = -1 if device == "GPU" else 0
        cfg = base.replace(**{role: {"n_gpu_layers": layers, "n_threads": threads}
                              for role in ("embedder", "expander", "reranker")})
        roles = {"embed": embed_rows, "qembed": query_embed_rows, "expand": expand_rows, "rerank": rerank_rows}
        for n in [1] + [int(x) for x in args.instances.split(",") if x and int(x) > 1]:
            # n instances share the node's cores on the CPU (each n_threads = cores / n)
            ncfg = cfg if device == "GPU" or n == 1 else cfg.replace(
                **{role: {"n_threads": max(1, threads // n)} for role in ("embedder", "expander", "reranker")})
            for role in args.roles.split(","):
                roles[role.strip()](ncfg, device, args.seconds, rows, n=n)  # each model freed before the next loads
            for k in filter(None, args.rerank_parallel.split(",")):
                rerank_rows(ncfg.replace(rerank={"parallel": int(k)}), device, args.seconds, rows, n=n)
            for spec in filter(None, args.embed_batches.split(",")):
                nb, bs = (int(x) for x in spec.split(":"))
                ecfg = ncfg.replace(embedder={"n_ctx": nb, "n_batch": nb, "n_ubatch": nb, "batch_size": bs})
                embed_rows(ecfg, device, args.seconds, rows, f"embed, n_batch {nb}, {bs} texts per embed() call", n=n)
                if "qembed" in args.roles:
                    query_embed_rows(ecfg, device, args.seconds, rows, n=n)

    head = ("| row | device | rate | unit | prompt tok/s | generation tok/s | prompt tok/call | generated tok/call "
            "| GPU memory after load |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['device']} | {r['rate']:.2f} | {r['unit']} | {r['pp_tps']:.0f} | "
                     f"{r['tg_tps']:.1f} | {r['pp_per_call']:.0f} | {r['tg_per_call']:.0f} | {r['gpu_mem']} |")
    for label in dict.fromkeys(r["row"] for r in rows):
        by = {r["device"]: r for r in rows if r["row"] == label}
        if "CPU" in by and "GPU" in by:
            c, g = by["CPU"], by["GPU"]
            gen = f", generation {g['tg_tps'] / c['tg_tps']:.1f}x" if c["tg_tps"] > 0 else ""
            lines.append(f"\n{label}: GPU / CPU = {g['rate'] / max(c['rate'], 1e-9):.1f}x per call, prompt "
                         f"{g['pp_tps'] / max(c['pp_tps'], 1e-9):.1f}x{gen}")
    if {"CPU", "GPU"} <= VECTORS.keys():
        import numpy as np

        cos = (VECTORS["CPU"] * VECTORS["GPU"]).sum(axis=1)
        lines.append(f"\nsame weights, CPU against GPU: embedding cosine {np.round(cos, 5).tolist()}")
    import itertools

    for a, b in itertools.combinations(SCORES, 2):  # the same eight pairs scored each way: same weights
        diff = max(abs(x - y) for x, y in zip(SCORES[a], SCORES[b]))
        lines.append(f"same weights, rerank scores {a} against {b}: differ by at most {diff:.4f}")
    table = "\n".join(lines)
    print("\n" + table)
    if args.out:
        Path(args.out, "gpu_check.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
