#!/usr/bin/env bash
# What set-up's llama-cpp-python wheel build costs, part by part, in CPU seconds (a shared, loaded machine's
# wall clock says little; CPU / nproc estimates the wall on a quiet machine of that many cores).
#
#   bash bench/wheel_build_cost.sh ['x64;zen4'] [common]   # a CMake list of variants; default: what set-up builds here
#
# Builds the wheel as scripts/setup.sh does (same sdist, same CMake arguments, the same two patches), with a
# throw-away venv and build folder under $WORK (default a new /tmp/wheel-cost-XXXXXX; nothing in .venv or the
# cache is touched), every compile and link step timed by a compiler/linker launcher. `common` keeps llama.cpp's
# common/ library that llama-cpp-python forces on (set-up drops it), to measure it. Prints user+sys and wall of
# the whole `pip wheel`, and CPU seconds by part: each CPU variant, libllama, ggml-base, common/, links.
# The sdist comes from $FANOUT_CACHE/dl when set-up already fetched it, else pip downloads it into $WORK.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VARIANTS=${1:-$("$PYTHON" scripts/cpu_variants.py)}
KEEP_COMMON=${2:-}
WORK=${WORK:-$(mktemp -d /tmp/wheel-cost-XXXXXX)}
V=0.3.36
mkdir -p "$WORK"
src=$(ls "${FANOUT_CACHE:-$HOME/.cache/fanout}"/dl/*/llama_cpp_python-$V.tar.gz 2>/dev/null | head -n1 || true)
[ -n "$src" ] || { "$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$WORK" "llama-cpp-python==$V"
                   src=$WORK/llama_cpp_python-$V.tar.gz; }
[ -x "$WORK/venv/bin/python" ] || "$PYTHON" -m venv "$WORK/venv"
rm -rf "$WORK/src" && mkdir -p "$WORK/src" && tar xzf "$src" -C "$WORK/src"
S=$WORK/src/llama_cpp_python-$V
"$PYTHON" scripts/cpu_variants.py --patch "$S/vendor/llama.cpp/ggml/src/CMakeLists.txt"
COMMON=-DLLAMA_BUILD_COMMON=ON
if [ "$KEEP_COMMON" != common ]; then
  sed -i '/^ *set(LLAMA_BUILD_COMMON ON CACHE BOOL .* FORCE)$/d' "$S/CMakeLists.txt"
  COMMON=-DLLAMA_BUILD_COMMON=OFF
fi
cat > "$WORK/launch.sh" <<'EOF'
#!/bin/bash
t=$(mktemp); /usr/bin/time -f "%U %S %e" -o "$t" "$@"; rc=$?
out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out=$a; prev=$a; done
echo "$(tail -1 "$t") $out" >> "$STEP_LOG"; rm -f "$t"; exit $rc
EOF
chmod +x "$WORK/launch.sh"
L=$WORK/launch.sh
export STEP_LOG=$WORK/steps.log; rm -f "$STEP_LOG"
ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON
-DGGML_CPU_VARIANTS_ONLY=$VARIANTS $COMMON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DGGML_OPENMP=ON -DCMAKE_C_COMPILER_LAUNCHER=$L
-DCMAKE_CXX_COMPILER_LAUNCHER=$L -DCMAKE_C_LINKER_LAUNCHER=$L -DCMAKE_CXX_LINKER_LAUNCHER=$L"
echo "building $VARIANTS (${KEEP_COMMON:+with }${KEEP_COMMON:-without} common/) in $WORK; load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s.%N)
CMAKE_ARGS="$(echo $ARGS)" FORCE_CMAKE=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) /usr/bin/time -f "%U %S %e" \
  -o "$WORK/total.txt" "$WORK/venv/bin/python" -m pip wheel -q --no-cache-dir --no-deps -w "$WORK" "$S" \
  >"$WORK/build.log" 2>&1 || { tail -n 30 "$WORK/build.log"; exit 1; }
"$PYTHON" - "$WORK" <<'EOF'
import collections, os, re, sys
work = sys.argv[1]
u, s, w = map(float, open(f"{work}/total.txt").read().split()[-3:])
parts, steps = collections.Counter(), collections.Counter()
for line in open(f"{work}/steps.log"):
    f = line.split(None, 3)
    out = f[3].strip() if len(f) > 3 else ""
    m = re.search(r"ggml-cpu-([a-z0-9_]+)", out)
    part = (f"variant {m.group(1)}" if m else "common/ + cpp-httplib" if "/common/" in out or "httplib" in out
            else "libllama" if "llama.dir" in out else "ggml-base" if "ggml-base" in out
            else "links" if ".so" in out else "other")
    parts[part] += float(f[0]) + float(f[1]); steps[part] += 1
print(f"pip wheel: {u + s:.1f} CPU-s (user {u:.1f} + sys {s:.1f}), wall {w:.0f} s; "
      f"CPU / {os.cpu_count()} cores = {(u + s) / os.cpu_count():.0f} s")
for part, cpu in parts.most_common():
    print(f"  {part:24s} {steps[part]:4d} steps {cpu:7.1f} CPU-s")
EOF
