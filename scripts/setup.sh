#!/usr/bin/env bash
# Idempotent setup for a fresh machine of our kind (Python 3.11, CPU only, no GPU, package registries only):
#   1. .venv in the repo root (pip upgraded once);
#   2. a portable llama-cpp-python wheel, built once into $FANOUT_CACHE/wheels/llama-<hash of version+flags>/
#      (the default -march=native build SIGILLs here: AMX is advertised but not allowed; pip's own wheel
#      cache ignores CMAKE_ARGS, so we keep our own), then installed into .venv;
#   3. pip install -e '.[dev]' (redone only when pyproject.toml changes; the dev extra holds the test tools and
#      llama-cpp-python's server extras for the served-model tests), then the project's bytecode;
#   4. the local profile's models (fanout.models.files install local, started in the background right after step 1
#      so downloads and the embedder's conversion overlap the wheel's compile; skipped when present);
#   5. a smoke test of the build on this CPU (scripts/smoke_llama.py in a subprocess: a real quantized
#      embedding and one expander token), redone when the wheel, the CPU or $FANOUT_GGML_CPU changes.
# A second run takes seconds. Env: PYTHON (default python3), FANOUT_CACHE (default ~/.cache/fanout),
# FANOUT_SETUP_SKIP_MODELS=1 to stop before step 4 (and skip 5), FANOUT_GGML_CPU=<variant> to force a
# ggml CPU kernel variant (e.g. haswell) when the automatic choice misbehaves.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
CACHE=${FANOUT_CACHE:-$HOME/.cache/fanout}
VENV=.venv
LLAMA_VERSION=0.3.36
# Runtime CPU dispatch: ggml CPU backends per micro-architecture in the wheel's bin/, the best usable one
# loaded at start by actors/_llama.py (llama-cpp-python 0.3.36 does not call ggml_backend_load_all itself).
# No -march=native; AMX is never chosen where the kernel forbids it. Which variants: scripts/cpu_variants.py
# (the best this CPU can run, its best non-AMX one beside an AMX variant, and the portable x64: 2 or 3
# compiled instead of GGML_CPU_ALL_VARIANTS' 14;
# FANOUT_GGML_VARIANTS=all builds every one, e.g. for an image shared by different CPUs). The vendored
# CMakeLists gets a two-line filter (GGML_CPU_VARIANTS_ONLY) so ALL_VARIANTS compiles only those.
say() { printf '[setup %(%H:%M:%S)T] %s\n' -1 "$*"; }
VARIANTS=$("$PYTHON" scripts/cpu_variants.py)
LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON \
-DGGML_CPU_VARIANTS_ONLY=$VARIANTS \
-DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DGGML_OPENMP=ON"
# FANOUT_GGML_CUDA=1 adds llama.cpp's CUDA backend to the same runtime-dispatch wheel (libggml-cuda.so in bin/,
# loaded beside the CPU variant). nvcc from $CUDACXX, or from PATH or /usr/local/cuda when its toolkit has
# cuBLAS; else CUDA 13.0 from PyPI: NVIDIA's nvidia-cuda-nvcc/-runtime/-cublas/-cccl/-crt and nvidia-nvvm
# wheels share one toolkit tree (nvidia/cu13) that set-up installs once into $CACHE/cuda-13.0 (~1 GB unpacked;
# compiling needs no GPU), plus the unversioned .so links CMake looks for, lib64 (nvcc's profile) and a
# libcuda.so.1 stub to link against (the wheels have no driver stub; the node's driver provides libcuda at run
# time). The wheel then needs libcudart.so.13 and libcublas.so.13 on the GPU node (a CUDA 13 runtime, or the
# same PyPI packages on LD_LIBRARY_PATH) and a driver >= 580. Architectures from FANOUT_CUDA_ARCHS (default
# 80;90: A100, H100/H200; 90-real alone halves the compile). Without the backend a role with n_gpu_layers != 0
# refuses to start (actors/_llama.py check_gpu_offload).
CUDA_PYPI=13.0
if [ "${FANOUT_GGML_CUDA:-0}" = 1 ]; then
  NVCC=${CUDACXX:-$(command -v nvcc || true)}
  [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
  # a system nvcc whose toolkit lacks cuBLAS (an image with the compiler alone) cannot build ggml-cuda
  if [ -n "$NVCC" ] && [ -z "${CUDACXX:-}" ]; then
    root=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
    ls "$root"/include/cublas_v2.h "$root"/targets/*/include/cublas_v2.h >/dev/null 2>&1 \
      || { say "$NVCC's toolkit ($root) has no cuBLAS: using PyPI's CUDA $CUDA_PYPI instead"; NVCC=; }
  fi
  if [ -z "$NVCC" ]; then
    TK=$CACHE/cuda-$CUDA_PYPI/nvidia/cu13
    if [ ! -x "$TK/bin/nvcc" ] || [ ! -e "$TK/lib/stubs/libcuda.so" ]; then
      say "installing the CUDA $CUDA_PYPI toolkit from PyPI into $CACHE/cuda-$CUDA_PYPI (no usable nvcc here)"
      "$PYTHON" -m pip install -q --no-deps --upgrade --target "$CACHE/cuda-$CUDA_PYPI" \
        "nvidia-cuda-nvcc==$CUDA_PYPI.*" "nvidia-cuda-runtime==$CUDA_PYPI.*" "nvidia-cublas==$CUDA_PYPI.*" \
        "nvidia-cuda-cccl==$CUDA_PYPI.*" "nvidia-cuda-crt==$CUDA_PYPI.*" "nvidia-nvvm==$CUDA_PYPI.*"
      for l in cudart cublas cublasLt; do ln -sf "lib$l.so.13" "$TK/lib/lib$l.so"; done
      ln -sfn lib "$TK/lib64"  # nvcc.profile links from lib64
      mkdir -p "$TK/lib/stubs"
      # the stub defines every driver function cuda.h declares (as NVIDIA's own stubs do), so the linker
      # records libcuda.so.1 as needed and ggml-cuda's cuMem*/cuDevice* calls bind to the driver at load time
      "${CC:-cc}" -E -P -x c -I"$TK/include" "$TK/include/cuda.h" | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' \
        | tr -d ' (' | sort -u | sed 's/.*/void &(void) {}/' \
        | "${CC:-cc}" -shared -x c - -Wl,-soname,libcuda.so.1 -o "$TK/lib/stubs/libcuda.so"
    fi
    NVCC=$TK/bin/nvcc
    export CUDAToolkit_ROOT=$TK
  fi
  export CUDACXX=$NVCC
  LLAMA_CMAKE_ARGS="$LLAMA_CMAKE_ARGS -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${FANOUT_CUDA_ARCHS:-80;90}"
fi
KEY=$(printf '%s|%s' "$LLAMA_VERSION" "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-16)
WHEEL_DIR=$CACHE/wheels/llama-$KEY
mkdir -p "$CACHE/locks" "$CACHE/wheels"

# 1. venv
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { say "need Python >= 3.11 ($PYTHON)"; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
PY=$VENV/bin/python

# 1b. the models, in the background while the wheel compiles (downloads and the embedder's conversion need
#     only the standard library, PyYAML and pip: fanout/models/files.py; step 4 waits for them)
MODELS_PID=
if [ "${FANOUT_SETUP_SKIP_MODELS:-0}" != 1 ]; then
  "$PY" -c 'import yaml' 2>/dev/null || "$PY" -m pip install -q pyyaml
  say "provisioning the local profile's models in the background (log: $VENV/.fanout-models.log)"
  ( FANOUT_CACHE=$CACHE "$PY" -m fanout.models.files install local >"$VENV/.fanout-models.log" 2>&1 ) &
  MODELS_PID=$!
fi

# 1c. the project's other dependencies (Ray, LanceDB, ...), also in the background while the wheel compiles:
#     downloads and unpacking overlap the compile; step 3 then only adds the project itself
STAMP=$VENV/.fanout-editable
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
DEPS_PID=
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  "$PY" - >"$VENV/.fanout-deps.txt" <<'DEPS'
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = p["dependencies"] + p.get("optional-dependencies", {}).get("dev", [])
print("\n".join(d for d in deps if not d.lower().startswith("llama-cpp-python")))
DEPS
  ( "$PY" -m pip install -q -r "$VENV/.fanout-deps.txt" >"$VENV/.fanout-deps.log" 2>&1 ) &
  DEPS_PID=$!
fi

# 2. portable llama-cpp-python wheel (built once per version+flags, shared by every checkout on the machine)
wheel() { ls "$WHEEL_DIR"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n1; }
if [ -z "$(wheel)" ]; then
  (
    flock 9
    if [ -z "$(wheel)" ]; then
      say "building llama-cpp-python $LLAMA_VERSION (CPU variants $VARIANTS${FANOUT_GGML_CUDA:+, CUDA}) into $WHEEL_DIR"
      tmp=$(mktemp -d "$CACHE/wheels/.build-XXXXXX")
      src=$(ls "$CACHE"/dl/*/llama_cpp_python-"$LLAMA_VERSION".tar.gz 2>/dev/null | head -n1 || true)
      if [ -z "$src" ]; then
        mkdir -p "$CACHE/dl/llama"
        "$PY" -m pip download -q --no-deps --no-binary :all: -d "$CACHE/dl/llama" "llama-cpp-python==$LLAMA_VERSION"
        src=$(ls "$CACHE"/dl/llama/llama_cpp_python-"$LLAMA_VERSION".tar.gz)
      fi
      tar xzf "$src" -C "$tmp"
      "$PYTHON" scripts/cpu_variants.py --patch "$tmp/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp/ggml/src/CMakeLists.txt"
      # llama-cpp-python forces llama.cpp's common/ library (and cpp-httplib with it) on, though the package
      # never loads it: without the force, -DLLAMA_BUILD_COMMON=OFF above holds (docs/performance.md, "Set-up
      # time"). A release that drops the line only costs the compile it used to
      sed -i '/^ *set(LLAMA_BUILD_COMMON ON CACHE BOOL .* FORCE)$/d' "$tmp/llama_cpp_python-$LLAMA_VERSION/CMakeLists.txt"
      CMAKE_ARGS="$LLAMA_CMAKE_ARGS" FORCE_CMAKE=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$PY" -m pip wheel -q --no-cache-dir --no-deps -w "$tmp" "$tmp/llama_cpp_python-$LLAMA_VERSION"
      mkdir -p "$WHEEL_DIR"
      printf '%s\n%s\n' "$LLAMA_VERSION" "$LLAMA_CMAKE_ARGS" > "$tmp/BUILD_FLAGS"
      mv "$tmp"/llama_cpp_python-*.whl "$tmp/BUILD_FLAGS" "$WHEEL_DIR"/
      rm -rf "$tmp"
    fi
  ) 9>"$CACHE/locks/llama-wheel.lock"
fi
WHEEL=$(wheel)
# installed from this path with these bytes (a wheel rebuilt in place, e.g. after a toolkit fix, is reinstalled)
installed=$("$PY" - <<'EOF' 2>/dev/null || true
import json
from importlib.metadata import distribution
d = json.loads(distribution("llama-cpp-python").read_text("direct_url.json") or "{}")
print(d.get("url", ""), d.get("archive_info", {}).get("hash", ""))
EOF
)
if [ "$installed" != "file://$WHEEL sha256=$(sha256sum "$WHEEL" | cut -d' ' -f1)" ]; then
  say "installing $WHEEL"
  "$PY" -m pip install -q --force-reinstall --no-deps "$WHEEL"  # its dependencies come with step 3
fi

# 3. the project, editable, with dev tools (redone when pyproject.toml changes)
[ -n "$DEPS_PID" ] && { wait "$DEPS_PID" || say "background dependency install failed (see $VENV/.fanout-deps.log): pip retries now"; }
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  say "pip install -e '.[dev]'"
  # setuptools' default editable finder: an import hook that maps pyproject's package-dir (actors/ is
  # fanout.actors, pipelines/ fanout.pipelines, ...), so a checkout imports exactly what the wheel installs and
  # nothing else (no top-level `actors`, no `fanout.bench`). It costs a bare `python -c pass` ~16 ms here
  # (pathlib, importlib.util), which the CLI imports anyway. Not compat mode: a plain path entry cannot map
  # package-dir. Not strict mode: its link tree loses to the checkout's own fanout/ whenever the repo root is
  # on sys.path first (`python -m bench.x`, pytest), and new files need a reinstall
  "$PY" -m pip install -q -e '.[dev]' 2>"$VENV/.fanout-install.log" \
    || { tail -n 20 "$VENV/.fanout-install.log" >&2; say "pip install -e failed (log: $VENV/.fanout-install.log)"; exit 1; }
  echo "$want" > "$STAMP"
fi
# bytecode for the project's modules, as an installed wheel has it: with PYTHONDONTWRITEBYTECODE set (CI,
# sandboxes) every CLI start would compile them from source again (~20 ms of the warm query path). Only
# changed files are recompiled; a stale .pyc is never used (Python checks the source's mtime)
"$PY" -m compileall -q fanout actors pipelines faces >/dev/null

# 4. models of the local profile (idempotent: size+mtime stamps, sha256 checked when first provisioned)
if [ "${FANOUT_SETUP_SKIP_MODELS:-0}" != 1 ]; then
  if [ -n "$MODELS_PID" ] && ! wait "$MODELS_PID"; then
    tail -n 20 "$VENV/.fanout-models.log" >&2
    say "model provisioning failed (above; full log $VENV/.fanout-models.log)"; exit 1
  fi
  FANOUT_CACHE=$CACHE "$PY" -m fanout.cli.main models install --profile local  # present: checks stamps, drops the converter

  # 5. smoke test: a SIGILL or a wrong vector fails set-up here, not a query later
  SMOKE_STAMP=$VENV/.fanout-smoke
  smoke_key=$( { echo "$WHEEL ${FANOUT_GGML_CPU:-}"; grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m
                 cat scripts/smoke_llama.py; } | sha256sum | cut -c1-16)
  if [ "$(cat "$SMOKE_STAMP" 2>/dev/null)" != "$smoke_key" ]; then
    say "smoke test of llama-cpp-python on this CPU"
    for attempt in 1 2 3 4; do
      set +e
      FANOUT_CACHE=$CACHE "$PY" scripts/smoke_llama.py 2>"$VENV/.fanout-smoke.err"
      rc=$?
      set -e
      # a variant that dies with SIGILL although every static check passed (a VM that permits AMX and still
      # traps its tile instructions): record it for this CPU, so fanout never loads it here, and try the next
      [ $rc -eq 132 ] && [ -z "${FANOUT_GGML_CPU:-}" ] || break
      died=$(FANOUT_CACHE=$CACHE "$PY" -c 'from fanout.actors._llama import backend_info; print(backend_info()["variant"])' 2>/dev/null || true)
      case "$died" in ""|built-in|"ggml's choice") break;; esac
      rec=$(FANOUT_CACHE=$CACHE "$PY" -c 'import sys; from fanout.actors._llama import record_sigill; print(record_sigill(sys.argv[1]))' "$died")
      say "ggml CPU variant $died died with SIGILL on this CPU: recorded in $rec; smoke test again without it"
    done
    if [ $rc -ne 0 ]; then
      tail -n 5 "$VENV/.fanout-smoke.err" >&2
      if [ $rc -eq 132 ]; then why="died with SIGILL (an instruction this CPU refuses)"
      elif [ $rc -gt 128 ]; then why="died with signal $((rc - 128))"
      else why="failed (exit $rc; see above)"; fi
      variants=$("$PY" -c 'import llama_cpp, pathlib; b = pathlib.Path(llama_cpp.__file__).resolve().parent.parent / "bin"
print(" ".join(sorted(p.name[12:-3] for p in b.glob("libggml-cpu-*.so"))))' 2>/dev/null || true)
      say "SMOKE TEST FAILED: llama-cpp-python ${FANOUT_GGML_CPU:+(FANOUT_GGML_CPU=$FANOUT_GGML_CPU) }$why."
      say "Force a more conservative ggml CPU variant and rerun, e.g. FANOUT_GGML_CPU=haswell bash scripts/setup.sh"
      say "(variants in this build: ${variants:-none}; export the same FANOUT_GGML_CPU when running fanout)"
      exit 1
    fi
    echo "$smoke_key" > "$SMOKE_STAMP"
  fi
fi
say "setup done"
