#!/usr/bin/env bash
# GPU check: the model roles' throughput CPU vs GPU in one table (bench/gpu_check.py: embedding, the 1.5B
# expander, rerank of 40), and proof that the CUDA backend really offloads.
#
#   bash bench/gpu_check.sh [SECONDS_PER_ROW]              # a GPU node set up with FANOUT_GGML_CUDA=1 (real models)
#   bash bench/gpu_check.sh --bundle DIR                   # here: pack what a bare GPU machine needs into DIR
#   bash bench/gpu_check.sh --from DIR [SECONDS_PER_ROW]   # there: install DIR, rebuild the models, measure
#
# --bundle (on the machine that built the wheel; no GPU needed): the newest CUDA llama-cpp-python wheel in
# set-up's wheel cache, built in a scratch checkout so this one keeps its CPU wheel:
#   FANOUT_GGML_CUDA=1 FANOUT_CUDA_ARCHS=90-real FANOUT_GGML_VARIANTS=x64,haswell,zen4 FANOUT_SETUP_SKIP_MODELS=1 \
#     bash scripts/setup.sh        # 27 min on 2 cores; 90-real: H100/H200 code only; CPU variants for any x86 host
# then its one dependency the GPU image lacks (diskcache) and the local-1.5b profile's three models as GGUF
# skeletons (bench/gguf_skeleton.py: header and tokenizer, ~1.3 MB each compressed); 61 MB in all, as a lent GPU
# machine takes 64 MiB and downloads nothing. --from (on that machine, with its own python3, which has
# numpy, pyarrow and PyYAML): installs the wheels into /tmp, rebuilds the models with synthetic weights (same
# shapes and quantization: the same work per token), finds the CUDA 13 runtime and cuBLAS the wheel links to,
# and runs the table with generation capped near the real 1.5B's length. Exit 1 when no GPU backend loads.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${FANOUT_CACHE:-$HOME/.cache/fanout}
MODELS="embeddinggemma-300m-Q8_0 qwen2.5-coder-1.5b-instruct-q4_k_m qwen2.5-coder-0.5b-instruct-q4_k_m"

if [ "${1:-}" = --bundle ]; then
  dir=${2:?--bundle DIR}
  wheel=$(grep -l 'GGML_CUDA=ON' "$CACHE"/wheels/llama-*/BUILD_FLAGS 2>/dev/null | xargs -r ls -t | head -n1 || true)
  [ -n "$wheel" ] || { echo "no CUDA wheel in $CACHE/wheels: run FANOUT_GGML_CUDA=1 bash scripts/setup.sh first"; exit 1; }
  rm -rf "$dir"; mkdir -p "$dir/wheels" "$dir/models"
  cp "$(dirname "$wheel")"/llama_cpp_python-*.whl "$dir/wheels/"
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: -d "$dir/wheels" \
    "diskcache==$(.venv/bin/python -c 'from importlib.metadata import version; print(version("diskcache"))')"
  for m in $MODELS; do
    .venv/bin/python -m bench.gguf_skeleton strip "$CACHE/models/$m.gguf" "$dir/models/$m.skel"
    xz -T0 -6 "$dir/models/$m.skel"
  done
  du -sh "$dir"; ls -la "$dir"/*
  exit 0
fi

PY=${PY:-.venv/bin/python}
ARGS=()
if [ "${1:-}" = --from ]; then
  dir=${2:?--from DIR}; shift 2
  PY=${FANOUT_GPU_PY:-python3}  # the GPU image's own Python (it has numpy, pyarrow, PyYAML)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/fanout-site "$dir"/wheels/*.whl
  export PYTHONPATH=/tmp/fanout-site:$PWD
  # the CUDA 13 runtime and cuBLAS the wheel's libggml-cuda.so needs: the system toolkit or NVIDIA's PyPI packages
  site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib "$site/nvidia/cu13/lib" \
           "$site"/nvidia/*/lib; do
    [ -e "$d/libcublas.so.13" ] || [ -e "$d/libcudart.so.13" ] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  done
  have() { local d ds; IFS=: read -ra ds <<< "${LD_LIBRARY_PATH:-}"
           for d in "${ds[@]}"; do [ -e "$d/$1" ] && return 0; done; ldconfig -p | grep -q "$1"; }
  for lib in libcublas.so.13 libcudart.so.13; do  # elsewhere on the image: the first copy found
    if ! have "$lib"; then
      f=$(find / -xdev -name "$lib" -not -path '/proc/*' 2>/dev/null | head -n1 || true)
      [ -n "$f" ] && export LD_LIBRARY_PATH=$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    fi
  done
  mkdir -p /tmp/fanout-models
  for m in $MODELS; do
    xz -dc "$dir/models/$m.skel.xz" > "/tmp/fanout-models/$m.skel"
    "$PY" bench/gguf_skeleton.py fill "/tmp/fanout-models/$m.skel" "/tmp/fanout-models/$m.gguf"
  done
  spec="embedder=/tmp/fanout-models/embeddinggemma-300m-Q8_0.gguf"
  spec="$spec,expander=/tmp/fanout-models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
  spec="$spec,reranker=/tmp/fanout-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
  # synthetic weights never stop early: 64 tokens is near the real 1.5B's ~53 (en) / ~70 (ru) per query
  ARGS=(--models "$spec" --expander-max-tokens 64)
fi
LIMIT=${1:-20}
[ $# -gt 0 ] && shift  # the rest goes to bench/gpu_check.py (--roles, --embed-batches, ...)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no GPU visible"; exit 1; }
bin=$("$PY" -c 'import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).resolve().parent.parent / "bin")')
ls "$bin"/libggml-cuda*.so >/dev/null 2>&1 \
  || { echo "this llama-cpp-python wheel has no CUDA backend ($bin): build it with FANOUT_GGML_CUDA=1"; exit 1; }
echo "libggml-cuda.so links: $(ldd "$bin"/libggml-cuda.so | grep -E 'libcu|not found' | tr -s ' \t' ' ' | tr '\n' ';')"
"$PY" - <<'EOF' || { echo "the CUDA backend did not load (driver, libcudart.so.13 / libcublas.so.13 on LD_LIBRARY_PATH?)"; exit 1; }
import sys
from fanout.actors._llama import load_backends
load_backends()
import llama_cpp
sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)
EOF
"$PY" bench/gpu_check.py --seconds "$LIMIT" "${ARGS[@]}" "$@"
