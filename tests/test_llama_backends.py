"""Choosing the ggml CPU kernel variant: never one the kernel forbids; forced variants give the same vectors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fanout.actors import _llama

ROOT = Path(__file__).resolve().parent.parent
_REAL_REFUSED = _llama.refused_variants
BITS = {"fma": 0, "f16c": 1, "sse42": 2, "bmi2": 3, "avx": 4, "avx2": 5, "avx_vnni": 6, "avx512": 7, "vbmi": 8,
        "bf16": 9, "vnni": 10, "amx": 11}
HASWELL = ["sse42", "avx", "f16c", "fma", "avx2", "bmi2"]
# what each variant is built with (ggml/src/CMakeLists.txt, GGML_CPU_ALL_VARIANTS)
VARIANTS = {"x64": [], "sse42": ["sse42"], "haswell": HASWELL, "skylakex": HASWELL + ["avx512"],
            "icelake": HASWELL + ["avx512", "vbmi", "vnni"], "zen4": HASWELL + ["avx512", "vbmi", "vnni", "bf16"],
            "sapphirerapids": HASWELL + ["avx512", "vbmi", "vnni", "bf16", "amx"]}
# /proc/cpuinfo flags of a Sapphire Rapids VM that advertises AMX
SPR_FLAGS = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx512f", "avx512cd", "avx512vl", "avx512dq",
             "avx512bw", "avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_tile", "amx_bf16"}


def cpuid_score(variant: str, cpu: set[str]) -> int:
    """ggml_backend_score as the variant computes it: 0 if CPUID lacks a feature, else 1 + its bits."""
    need = VARIANTS[variant]
    if any(f not in cpu for f in need):
        return 0
    return 1 + sum(1 << BITS[f] for f in need)


@pytest.fixture
def fake_cpu(monkeypatch, tmp_path):
    """A machine whose CPUID reports `cpuid`, whose kernel shows `flags`, and grants AMX or not."""
    def make(cpuid: set[str], flags: set[str], amx_ok: bool) -> list[Path]:
        libs = [tmp_path / f"libggml-cpu-{v}.so" for v in VARIANTS]
        monkeypatch.setattr(_llama, "_variant_score", lambda p: cpuid_score(_llama._variant_name(p), cpuid))
        monkeypatch.setattr(_llama, "_cpu_flags", lambda: flags)
        monkeypatch.setattr(_llama, "_amx_permitted", lambda: amx_ok)
        monkeypatch.setattr(_llama, "refused_variants", lambda: set())
        return libs
    return make


def test_amx_advertised_but_refused_picks_best_non_amx_variant(fake_cpu):
    # the 2026-11-30 machine: CPUID and /proc/cpuinfo list AMX, the kernel refuses ARCH_REQ_XCOMP_PERM
    cpuid = {"sse42", "avx", "f16c", "fma", "avx2", "bmi2", "avx512", "vbmi", "vnni", "bf16", "amx"}
    libs = fake_cpu(cpuid, SPR_FLAGS, amx_ok=False)
    lib, table = _llama.choose_cpu_variant(libs)
    assert _llama._variant_name(lib) == "zen4"  # highest score without AMX
    why = {r["variant"]: r["why_not"] for r in table}
    assert "ARCH_REQ_XCOMP_PERM" in why["sapphirerapids"] and why["zen4"] == ""


def test_variant_that_died_in_the_smoke_test_is_skipped(fake_cpu, monkeypatch, tmp_path):
    # the 2026-12-02 machine: AMX advertised and permitted, yet ggml's tileloadd traps; set-up records it
    cpuid = {"sse42", "avx", "f16c", "fma", "avx2", "bmi2", "avx512", "vbmi", "vnni", "bf16", "amx"}
    libs = fake_cpu(cpuid, SPR_FLAGS, amx_ok=True)
    monkeypatch.setenv("FANOUT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_llama, "refused_variants", _REAL_REFUSED)
    assert _llama.refused_variants() == set()
    path = _llama.record_sigill("sapphirerapids")
    assert path.is_relative_to(tmp_path) and _llama.refused_variants() == {"sapphirerapids"}
    lib, table = _llama.choose_cpu_variant(libs)
    assert _llama._variant_name(lib) == "zen4"
    assert "SIGILL" in {r["variant"]: r["why_not"] for r in table}["sapphirerapids"]
    with pytest.raises(RuntimeError, match="SIGILL"):
        _llama.choose_cpu_variant(libs, forced="sapphirerapids")


def test_amx_permitted_picks_amx_variant(fake_cpu):
    cpuid = {"sse42", "avx", "f16c", "fma", "avx2", "bmi2", "avx512", "vbmi", "vnni", "bf16", "amx"}
    lib, _ = _llama.choose_cpu_variant(fake_cpu(cpuid, SPR_FLAGS, amx_ok=True))
    assert _llama._variant_name(lib) == "sapphirerapids"


def test_feature_in_cpuid_but_hidden_by_kernel_is_not_used(fake_cpu):
    # CPUID says AVX-512 but the kernel did not enable its state (no avx512* in /proc/cpuinfo)
    cpuid = {"sse42", "avx", "f16c", "fma", "avx2", "bmi2", "avx512"}
    flags = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"}
    lib, table = _llama.choose_cpu_variant(fake_cpu(cpuid, flags, amx_ok=False))
    assert _llama._variant_name(lib) == "haswell"
    assert "avx512f" in {r["variant"]: r["why_not"] for r in table}["skylakex"]


def test_forced_variant_is_checked(fake_cpu):
    cpuid = {"sse42", "avx", "f16c", "fma", "avx2", "bmi2"}
    flags = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"}
    libs = fake_cpu(cpuid, flags, amx_ok=False)
    assert _llama._variant_name(_llama.choose_cpu_variant(libs, "x64")[0]) == "x64"
    with pytest.raises(RuntimeError, match="choose one of"):
        _llama.choose_cpu_variant(libs, "pentium")
    with pytest.raises(RuntimeError, match="cannot run on this CPU.*usable here"):
        _llama.choose_cpu_variant(libs, "zen4")


def test_unknown_score_bits_are_not_trusted():
    assert "unknown feature bits" in _llama._why_unusable(1 + (1 << 14), None, amx_ok=True)


EMBED = """
import json, sys
import numpy as np, pyarrow as pa
from fanout.actors._llama import backend_info
from fanout.actors.embedder import Embedder
from fanout.config import load_config
emb = Embedder(load_config())
v = emb(pa.table({"text": [sys.argv[1]], "role": ["document"]}))["vector"][0].as_py()
print(json.dumps({"variant": backend_info()["variant"], "v": v}))
"""


def embed_with(variant: str | None, text: str) -> tuple[str, np.ndarray]:
    env = {k: v for k, v in os.environ.items() if k != "FANOUT_GGML_CPU"}
    if variant:
        env["FANOUT_GGML_CPU"] = variant
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.run([sys.executable, "-c", EMBED, text], env=env, capture_output=True, text=True, check=False)
    assert p.returncode == 0, f"FANOUT_GGML_CPU={variant}: rc {p.returncode}\n{p.stderr[-1500:]}"
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return out["variant"], np.asarray(out["v"], dtype=np.float32)


@pytest.mark.model
def test_machine_without_avx512_gives_the_same_vectors():
    """The portable x64 variant (no SIMD; always built, scripts/cpu_variants.py) and haswell (AVX2, when this
    machine's build has it), forced, embed like the variant chosen for this CPU."""
    import llama_cpp

    bindir = Path(llama_cpp.__file__).resolve().parent.parent / "bin"
    have = {p.name[len("libggml-cpu-"):-3] for p in bindir.glob("libggml-cpu-*.so")}
    assert "x64" in have, f"not a dynamic-backend build ({bindir}): run scripts/setup.sh"
    text = "title: Sync | text: Sync keeps your vault the same on every device; open Settings > Sync."
    chosen, ref = embed_with(None, text)
    for variant in sorted({"haswell", "x64"} & have):
        got, v = embed_with(variant, text)
        assert got == variant
        assert float(v @ ref) > 0.999, f"{variant} vs {chosen}: cosine {float(v @ ref):.5f}"


# -- a GPU profile on a CPU-only wheel fails loudly, never runs on the CPU unnoticed ------------------------------


@pytest.mark.model
def test_gpu_layers_without_a_gpu_backend_fail_with_what_was_asked_and_the_fix():
    from fanout.actors.embedder import Embedder

    from fanout.config import load_config

    cfg = load_config("local").replace(embedder={"n_gpu_layers": -1})
    with pytest.raises(_llama.GPUBackendMissing, match=r"embedder.n_gpu_layers is -1 .* no GPU backend is loaded: "
                       r"the llama-cpp-python wheel has CPU backends only .*FANOUT_GGML_CUDA=1 .*"
                       r"embedder.n_gpu_layers: 0"):
        Embedder(cfg)



def test_a_gpu_backend_that_does_not_load_is_named_with_the_loaders_reason(tmp_path, monkeypatch):
    """A CUDA wheel on a node without the driver or the CUDA 13 libraries: the error quotes the loader."""
    import llama_cpp

    (tmp_path / "libggml-cuda.so").write_text("not a shared object")
    monkeypatch.setattr(_llama, "_bindir", lambda: tmp_path)
    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: False)
    from fanout.config import load_config

    acfg = load_config("local").replace(reranker={"n_gpu_layers": 8}).reranker
    with pytest.raises(_llama.GPUBackendMissing, match=r"reranker.n_gpu_layers is 8 .*the wheel has libggml-cuda.so "
                       r"but it did not load \(.*(invalid ELF|file too short).*\).*libcublas.so.13.*n_gpu_layers: 0"):
        _llama.check_gpu_offload(acfg, "reranker")

@pytest.mark.model
def test_gguf_skeleton_rebuilds_a_model_of_the_same_shape(tmp_path):
    """bench/gguf_skeleton.py (the GPU check's models): header kept byte for byte, weights synthetic but valid."""
    from bench import gguf_skeleton as gs
    from fanout.config import load_config

    cfg = load_config("local")
    real = _llama.model_path(cfg, "embedder")
    skel, synth = tmp_path / "e.skel", tmp_path / "e.gguf"
    gs.strip(real, skel)
    assert skel.stat().st_size < real.stat().st_size / 20  # metadata and tokenizer only
    gs.fill(skel, synth)
    assert synth.stat().st_size == real.stat().st_size
    with open(real, "rb") as f:
        assert synth.read_bytes()[:skel.stat().st_size] == f.read(skel.stat().st_size)
    assert gs.read_layout(skel.read_bytes()) == gs.read_layout(synth.read_bytes()[:skel.stat().st_size])
    from fanout.actors.embedder import Embedder

    emb = Embedder(cfg.replace(models={"embedder": str(synth)}))
    v = emb.embed_texts(["Sync keeps your notes the same on every device."])
    assert v.shape == (1, 768) and np.isfinite(v).all()
    with pytest.raises(ValueError, match="not a GGUF file"):
        gs.read_layout(b"PK\x03\x04" + bytes(60))

def test_cpu_variants_setup_builds_cover_each_cpu_and_keep_a_fallback():
    """scripts/cpu_variants.py: the best variant the CPU can run plus x64, and the best non-AMX one beside an
    AMX variant (AMX can pass every check and still trap: the smoke test then falls back to it, not to x64);
    AMX only where granted."""
    from scripts import cpu_variants as cv

    spr = SPR_FLAGS
    assert cv.choose(spr, amx_ok=True) == ["x64", "zen4", "sapphirerapids"]
    assert cv.choose(spr, amx_ok=False) == ["x64", "zen4"]
    epyc_zen4 = spr - {"amx_int8", "amx_tile", "amx_bf16"}
    assert cv.choose(epyc_zen4, amx_ok=False) == ["x64", "zen4"]
    cooperlake = epyc_zen4 - {"avx512vbmi"}
    assert cv.choose(cooperlake, amx_ok=False) == ["x64", "cooperlake"]
    zen1 = {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"}
    assert cv.choose(zen1, amx_ok=False) == ["x64", "haswell"]
    assert cv.choose({"sse2"}, amx_ok=False) == ["x64"]
    assert cv.choose(zen1, amx_ok=False, env="all") == list(cv.VARIANTS)
    assert cv.choose(zen1, amx_ok=False, env="haswell") == ["x64", "haswell"]
    with pytest.raises(SystemExit, match="unknown variant"):
        cv.choose(zen1, amx_ok=False, env="zen9")
    for v in ("haswell", "zen4", "sapphirerapids"):  # the scores agree with the test's own ggml model
        assert cv.score(v) == cpuid_score(v, set(BITS))
