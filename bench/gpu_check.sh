#!/usr/bin/env bash
# GPU check, one short prepared script for a lent GPU machine (no build there: the CUDA wheel is built
# beforehand with `FANOUT_GGML_CUDA=1 bash scripts/setup.sh` on a machine with nvcc, and carried along).
#
#   bash bench/gpu_check.sh [SECONDS_PER_ROW]     # prints one table; exit 1 when the GPU backend is absent
#
# Rows: embedding throughput (chunks/s, embeddinggemma, 300-token chunks) with n_gpu_layers 0 vs -1;
# the 1.5B expander's queries/s (the agent's three fields, greedy) CPU vs GPU; rerank of the top 40 passages
# of one query (pairs/s) CPU vs GPU; and the refusal when a GPU is asked of a CPU-only process
# (actors/_llama.py check_gpu_offload). Each row runs at most SECONDS_PER_ROW (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:-60}
PY=${PY:-.venv/bin/python}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no GPU visible"; exit 1; }
ls "$("$PY" -c 'import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).resolve().parent.parent / "bin")')"/libggml-cuda*.so \
  >/dev/null 2>&1 || { echo "this llama-cpp-python wheel has no CUDA backend: build it with FANOUT_GGML_CUDA=1"; exit 1; }
"$PY" - "$LIMIT" <<'EOF'
import sys
import time

import pyarrow as pa

from actors._llama import backend_info, load_backends
from fanout.config import load_config

limit = float(sys.argv[1])
load_backends()
import llama_cpp  # noqa: E402

print("GPU offload supported:", llama_cpp.llama_supports_gpu_offload(), "| CPU variant:", backend_info()["variant"])
base = load_config("local-1.5b")
text = ("Sync keeps your notes up to date across devices. Open Settings, choose Sync, sign in and pick a remote "
        "vault; conflicts are merged per file and the version history keeps deleted notes for a year. ") * 6
rows = []


def timed(label, gpu, fn, unit):
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < limit:
        n += fn()
    rows.append((label, "GPU" if gpu else "CPU", n / (time.perf_counter() - t0), unit))


for gpu in (False, True):
    layers = -1 if gpu else 0
    cfg = base.replace(embedder={"n_gpu_layers": layers}, expander={"n_gpu_layers": layers},
                       reranker={"n_gpu_layers": layers})
    from actors.embedder import Embedder
    emb = Embedder(cfg)
    batch = pa.table({"text": [text] * 32, "role": ["document"] * 32})
    timed("embed 32 chunks/call", gpu, lambda: (emb(batch), 32)[1], "chunks/s")
    del emb
    from actors.expander import QueryExpander
    exp = QueryExpander(cfg)
    q = pa.table({"qid": ["q1"], "query": ["how do I restore a deleted note"], "intent": pa.array([None], pa.string())})
    timed("1.5B expander, one query", gpu, lambda: (exp(q), 1)[1], "queries/s")
    del exp
    from actors.reranker import Reranker
    rr = Reranker(cfg)
    pairs = pa.table({"query": ["restore a deleted note"] * 40, "intent": pa.array([None] * 40, pa.string()),
                      "passage": [f"{text[:400]} ({i})" for i in range(40)]})
    timed("rerank top 40 of one query", gpu, lambda: (rr(pairs), 40)[1], "pairs/s")
    del rr

print("\n| row | device | rate | unit |\n|---|---|---|---|")
for label, dev, rate, unit in rows:
    print(f"| {label} | {dev} | {rate:.2f} | {unit} |")
for label in dict.fromkeys(r[0] for r in rows):
    cpu = next(r[2] for r in rows if r[0] == label and r[1] == "CPU")
    gpu = next(r[2] for r in rows if r[0] == label and r[1] == "GPU")
    print(f"{label}: GPU / CPU = {gpu / max(cpu, 1e-9):.1f}x")
EOF
