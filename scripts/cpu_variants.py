"""Which ggml CPU kernel variants scripts/setup.sh builds into the llama-cpp-python wheel on this machine.

    python scripts/cpu_variants.py            # e.g. "x64;zen4" (a CMake list)
    python scripts/cpu_variants.py --explain  # one line per variant: its score here, or why it cannot run

Stdlib only: it runs before anything is installed. `GGML_CPU_ALL_VARIANTS` compiles 14 x86 variants (10.5 of
set-up's 16 minutes on 2 cores), yet the wheel is built on, and cached for, the machine that runs it (the
cache key holds the list). A machine needs two: the best variant its CPU and kernel can run and `x64`, the
portable floor (a variant that dies with SIGILL anyway is recorded by set-up's smoke test, and fanout loads the
next one built, actors/_llama.py). An AMX variant also brings the best non-AMX one: a VM can permit AMX and
still trap ggml's AMX kernel (the 2-core Xeon VM does), and its fallback should be AVX-512, not x64. So every
CPU still gets the best kernels it can run (AVX2 as haswell; AVX-512 as skylakex, with VBMI/VNNI as icelake,
with BF16 as zen4; AMX as sapphirerapids where the kernel allows it) while set-up compiles 2 or 3 variants
instead of 14 (each costs 30-50 CPU-s of the build: docs/performance.md, "Set-up time").
`FANOUT_GGML_VARIANTS=all` builds every variant (an image shared by machines of different CPUs); a comma list
(e.g. `haswell,x64`) builds those.
"""

from __future__ import annotations

import os
import sys

# llama.cpp's x86 variant list (ggml/src/CMakeLists.txt, as vendored by llama-cpp-python 0.3.36) with the
# /proc/cpuinfo flags each compiled feature needs; ggml's score bit for each feature (cpu-feats.cpp)
_FEATURE_FLAGS: dict[str, tuple[int, tuple[str, ...]]] = {
    "FMA": (0, ("fma",)), "F16C": (1, ("f16c",)), "SSE42": (2, ("sse4_2",)), "BMI2": (3, ("bmi2",)),
    "AVX": (4, ("avx",)), "AVX2": (5, ("avx2",)), "AVX_VNNI": (6, ("avx_vnni",)),
    "AVX512": (7, ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    "AVX512_VBMI": (8, ("avx512vbmi",)), "AVX512_BF16": (9, ("avx512_bf16",)),
    "AVX512_VNNI": (10, ("avx512_vnni",)), "AMX_TILE": (11, ("amx_tile",)), "AMX_INT8": (11, ("amx_int8",)),
}
_BASE = ("SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2")
VARIANTS: dict[str, tuple[str, ...]] = {
    "x64": (),
    "sse42": ("SSE42",),
    "sandybridge": ("SSE42", "AVX"),
    "ivybridge": ("SSE42", "AVX", "F16C"),
    "piledriver": ("SSE42", "AVX", "F16C", "FMA"),
    "haswell": _BASE,
    "skylakex": (*_BASE, "AVX512"),
    "cannonlake": (*_BASE, "AVX512", "AVX512_VBMI"),
    "cascadelake": (*_BASE, "AVX512", "AVX512_VNNI"),
    "icelake": (*_BASE, "AVX512", "AVX512_VBMI", "AVX512_VNNI"),
    "cooperlake": (*_BASE, "AVX512", "AVX512_VNNI", "AVX512_BF16"),
    "zen4": (*_BASE, "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"),
    "alderlake": (*_BASE, "AVX_VNNI"),
    "sapphirerapids": (*_BASE, "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16", "AMX_TILE", "AMX_INT8"),
}


def cpu_flags() -> set[str] | None:
    """The CPU flags Linux lets processes use; None where /proc/cpuinfo has none (not Linux, not x86)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def amx_permitted() -> bool:
    """The kernel grants AMX tile state (ARCH_REQ_XCOMP_PERM), as actors/_llama.py asks before loading."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18) == 0
    except (OSError, AttributeError):
        return False


def score(variant: str) -> int:
    """ggml's backend score for a variant: 1 + the sum of its features' bits."""
    return 1 + sum(1 << b for b in {_FEATURE_FLAGS[f][0] for f in VARIANTS[variant]})


def why_not(variant: str, flags: set[str], amx_ok: bool) -> str:
    """"" when the variant can run here, else what is missing."""
    missing = [fl for f in VARIANTS[variant] for fl in _FEATURE_FLAGS[f][1] if fl not in flags]
    if missing:
        return "missing " + ",".join(dict.fromkeys(missing))
    if "AMX_TILE" in VARIANTS[variant] and not amx_ok:
        return "AMX refused by the kernel"
    return ""


def choose(flags: set[str] | None, amx_ok: bool, env: str = "") -> list[str]:
    """The variants to build: $FANOUT_GGML_VARIANTS when set, else the best usable here plus x64 (and the best
    non-AMX one when the best is an AMX variant)."""
    env = env.strip()
    if env == "all":
        return list(VARIANTS)
    if env:
        names = [n.strip() for n in env.split(",") if n.strip()]
        bad = [n for n in names if n not in VARIANTS]
        if bad:
            raise SystemExit(f"FANOUT_GGML_VARIANTS: unknown variant(s) {bad}; choose from {sorted(VARIANTS)} "
                             f"or 'all'")
        return sorted(set(names) | {"x64"}, key=score)
    if flags is None:  # no /proc/cpuinfo to read: the portable wheel
        return list(VARIANTS)
    usable = sorted((v for v in VARIANTS if not why_not(v, flags, amx_ok)), key=score)
    keep = {usable[-1], "x64"}
    if "AMX_TILE" in VARIANTS[usable[-1]]:  # AMX can pass every check and still trap: keep its non-AMX twin
        keep.add(next(v for v in reversed(usable) if "AMX_TILE" not in VARIANTS[v]))
    return sorted(keep, key=score)


_FILTER = """function(ggml_add_cpu_backend_variant tag_name)
    if (DEFINED GGML_CPU_VARIANTS_ONLY AND NOT "${tag_name}" IN_LIST GGML_CPU_VARIANTS_ONLY)
        return()  # fanout: scripts/cpu_variants.py chose the variants this machine needs
    endif()
"""


def patch(cmakelists: str) -> None:
    """Let -DGGML_CPU_VARIANTS_ONLY=a;b;c keep only those variants of GGML_CPU_ALL_VARIANTS (idempotent)."""
    with open(cmakelists, encoding="utf-8") as fh:
        text = fh.read()
    head = "function(ggml_add_cpu_backend_variant tag_name)\n"
    if "GGML_CPU_VARIANTS_ONLY" in text:
        return
    if text.count(head) != 1:
        raise SystemExit(f"{cmakelists}: expected one '{head.strip()}' to patch; llama.cpp changed its CMake "
                         f"layout: update scripts/cpu_variants.py or set FANOUT_GGML_VARIANTS=all")
    with open(cmakelists, "w", encoding="utf-8") as fh:
        fh.write(text.replace(head, _FILTER))


def main() -> None:
    if sys.argv[1:2] == ["--patch"]:
        patch(sys.argv[2])
        return
    flags, amx_ok = cpu_flags(), amx_permitted()
    if "--explain" in sys.argv:
        for v in sorted(VARIANTS, key=score):
            print(f"{v:15s} score {score(v):5d}  {why_not(v, flags or set(), amx_ok) or 'usable'}")
    print(";".join(choose(flags, amx_ok, os.environ.get("FANOUT_GGML_VARIANTS", ""))))


if __name__ == "__main__":
    main()
