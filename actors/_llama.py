"""Loading GGUF models with llama-cpp-python, shared by the three actors (imported lazily, in __init__)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fanout.config import ActorConfig, Config
from fanout.errors import BackendError, GPUBackendMissing

if TYPE_CHECKING:
    from llama_cpp import Llama

log = logging.getLogger(__name__)


def model_path(cfg: Config, role: str) -> Path:
    """Resolve (and if needed provision) the GGUF file configured for `role`."""
    from fanout.models.files import resolve_model

    spec = getattr(cfg.models, role)
    return resolve_model(spec, Path(cfg.models.cache_dir) if cfg.models.cache_dir else None)


@contextlib.contextmanager
def _quiet_stderr():
    """llama.cpp logs to fd 2 even with verbose=False (e.g. Gemma's SWA line); silence it while loading."""
    if os.environ.get("FANOUT_DEBUG_LLAMA"):
        yield
        return
    fd = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(fd, 2)
        os.close(fd)


# ggml's x86 backend score (ggml/src/ggml-cpu/arch/x86/cpu-feats.cpp, llama.cpp as vendored by
# llama-cpp-python 0.3.36): 1 + the sum of 1 << bit over the features a variant was compiled with, or 0 when
# CPUID lacks one. Bit -> the /proc/cpuinfo flags the kernel shows when it lets a process use that feature.
_X86_SCORE_BITS: dict[int, tuple[str, ...]] = {
    0: ("fma",), 1: ("f16c",), 2: ("sse4_2",), 3: ("bmi2",), 4: ("avx",), 5: ("avx2",), 6: ("avx_vnni",),
    7: ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"), 8: ("avx512vbmi",), 9: ("avx512_bf16",),
    10: ("avx512_vnni",), 11: ("amx_int8", "amx_tile"),
}
_AMX_BIT = 11
_NON_CPU_BACKENDS = ("blas", "cuda", "hip", "metal", "vulkan", "sycl", "opencl", "musa", "rpc")
_BACKENDS: dict[str, Any] = {}


def _cpu_flags() -> set[str] | None:
    """The CPU flags Linux lets processes use (it hides what XCR0 does not enable); None off Linux."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


def _amx_permitted() -> bool:
    """Ask Linux for the AMX tile state (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); False when refused.

    A CPU (or VM) can advertise AMX in CPUID and /proc/cpuinfo while the kernel refuses the permission; an
    AMX instruction then dies with SIGILL. This is the same request ggml's AMX code makes, made first.
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(158, 0x1023, 18) == 0  # SYS_arch_prctl on x86_64, ARCH_REQ_XCOMP_PERM, XTILEDATA
    except (OSError, AttributeError):
        return False


def sigill_record() -> Path:
    """The file where set-up lists the CPU variants that died with SIGILL on this machine kind.

    Keyed by the kernel's CPU flags and release: a VM can advertise and even permit AMX and still kill ggml's
    AMX kernels (the 2026-12-02 Firecracker VM: ARCH_REQ_XCOMP_PERM granted, tileloadd raises #UD inside
    ggml_backend_amx_mul_mat). No static check sees that, so scripts/setup.sh records what its smoke test saw.
    """
    import hashlib

    from fanout.models.files import cache_root

    key = hashlib.sha256(f"{sorted(_cpu_flags() or ())}|{os.uname().release}".encode()).hexdigest()[:16]
    return cache_root() / "cpu" / f"sigill-{key}.txt"


def refused_variants() -> set[str]:
    """Variants the set-up smoke test saw die with SIGILL here (empty when none or never recorded)."""
    try:
        return {ln.strip() for ln in sigill_record().read_text(encoding="utf-8").splitlines() if ln.strip()}
    except OSError:
        return set()


def record_sigill(variant: str) -> Path:
    """Add `variant` to this machine's SIGILL record (called by scripts/setup.sh after a smoke test died)."""
    path = sigill_record()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(variant + "\n")
    return path


def _variant_score(lib: Path) -> int:
    """The variant's own `ggml_backend_score()` (what ggml ranks by); the library is closed again."""
    import _ctypes
    import ctypes

    try:
        handle = ctypes.CDLL(str(lib))
    except OSError as exc:
        log.warning("cannot load %s: %s", lib.name, exc)
        return 0
    try:
        fn = handle.ggml_backend_score
        fn.restype, fn.argtypes = ctypes.c_int, []
        return int(fn())
    except AttributeError:
        return 0
    finally:
        _ctypes.dlclose(handle._handle)


def _why_unusable(score: int, flags: set[str] | None, amx_ok: bool) -> str:
    """"" when a variant with this score can run here, else the reason (missing flag, AMX refused...)."""
    if score <= 0:
        return "CPUID lacks a feature it was built for"
    bits = score - 1
    unknown = bits & ~sum(1 << b for b in _X86_SCORE_BITS)
    if unknown:
        return f"unknown feature bits {unknown:#x} in score {score} (newer ggml?)"
    needed = [f for b, fs in _X86_SCORE_BITS.items() if bits >> b & 1 for f in fs]
    if flags is not None:
        missing = [f for f in needed if f not in flags]
        if missing:
            return f"the kernel does not enable {', '.join(missing)}"
    if bits >> _AMX_BIT & 1 and not amx_ok:
        return "AMX is advertised but the kernel refused ARCH_REQ_XCOMP_PERM (an AMX instruction would SIGILL)"
    return ""


def _variant_name(lib: Path) -> str:
    return lib.name.removeprefix("libggml-cpu-").removesuffix(".so")


def choose_cpu_variant(variants: list[Path], forced: str = "") -> tuple[Path, list[dict[str, Any]]]:
    """The best CPU variant that can actually run here, and what was decided for each candidate.

    ggml itself picks the highest `ggml_backend_score`, which reads CPUID only ("FIXME: this does not check
    for OS support"); here a variant also needs every feature it was built for enabled by the kernel, and an
    AMX variant needs the AMX permission, and none that set-up saw die with SIGILL here. `forced` (from $FANOUT_GGML_CPU) must name a usable variant.
    """
    flags = _cpu_flags()
    scores = {v: _variant_score(v) for v in variants}
    amx_ok = any((s - 1) >> _AMX_BIT & 1 for s in scores.values() if s > 0) and _amx_permitted()
    died = refused_variants()
    table: list[dict[str, Any]] = [{"variant": _variant_name(v), "score": scores[v], "why_not": _why_unusable(scores[v], flags, amx_ok)
              or ("died with SIGILL in the set-up smoke test (see actors/_llama.py sigill_record)"
                  if _variant_name(v) in died else "")}
             for v in variants]
    by_name = dict(zip((_variant_name(v) for v in variants), variants))
    if forced:
        if forced not in by_name:
            raise BackendError(f"FANOUT_GGML_CPU={forced!r}: no libggml-cpu-{forced}.so in the llama-cpp-python "
                               f"wheel; choose one of {sorted(by_name)} or unset FANOUT_GGML_CPU")
        row = next(r for r in table if r["variant"] == forced)
        if row["why_not"]:
            ok = sorted(r["variant"] for r in table if not r["why_not"])
            raise BackendError(f"FANOUT_GGML_CPU={forced!r} cannot run on this CPU: {row['why_not']}; "
                               f"usable here: {ok}")
        return by_name[forced], table
    usable = [(r["score"], by_name[r["variant"]]) for r in table if not r["why_not"]]
    if not usable:
        raise BackendError(f"no ggml CPU variant can run on this CPU ({table}); rebuild llama-cpp-python "
                           f"(scripts/setup.sh) or set FANOUT_GGML_CPU")
    return max(usable)[1], table


def load_backends() -> None:
    """Load the best usable ggml CPU backend variant (GGML_BACKEND_DL build) once per process.

    llama-cpp-python 0.3.36 never calls `ggml_backend_load_all` (abetlen/llama-cpp-python#2069), so a
    dynamic-backend build has no backend until we do. It must go through `libggml.so.0`, the soname libllama
    links (the wheel's separate `libggml.so` copy would fill a second, unused registry). The CPU variant is
    chosen by `choose_cpu_variant` (never an AMX variant the kernel forbids); other backends in the wheel
    (CUDA, Vulkan, ... builds) are loaded as ggml would. A build without dynamic backends has no
    `bin/libggml-cpu-*.so`: nothing to do. $FANOUT_GGML_CPU=haswell (or any variant name) forces one, e.g.
    to check that a machine without AVX-512 works. `backend_info()` says what was loaded and why.
    """
    if _BACKENDS:
        return
    import ctypes
    import platform

    import llama_cpp

    libdir, bindir = Path(llama_cpp.__file__).resolve().parent / "lib", _bindir()
    variants = sorted(bindir.glob("libggml-cpu-*.so"))
    forced = os.environ.get("FANOUT_GGML_CPU", "")
    _BACKENDS.update(variants=[_variant_name(v) for v in variants], forced=forced, variant="built-in",
                     candidates=[], reason="not a dynamic-backend build: the CPU kernels are linked in")
    if not variants or not (libdir / "libggml.so.0").exists():
        return
    ggml = ctypes.CDLL(str(libdir / "libggml.so.0"))
    ggml.ggml_backend_load.restype = ctypes.c_void_p
    ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    if platform.machine().lower() not in ("x86_64", "amd64"):
        # other architectures score differently; ggml's own choice (no AMX question there)
        ggml.ggml_backend_load_all_from_path(str(bindir).encode())
        _BACKENDS.update(lib=ggml, variant="ggml's choice", reason=f"{platform.machine()}: ggml_backend_load_all")
        return
    lib, table = choose_cpu_variant(variants, forced)
    with _quiet_stderr():  # ggml logs "load_backend: loaded CPU backend from ..." on fd 2
        handle = ggml.ggml_backend_load(str(lib).encode())
    if not handle:
        raise BackendError(f"{lib} did not load (ggml_backend_load returned NULL); set FANOUT_GGML_CPU to one "
                           f"of {[r['variant'] for r in table if not r['why_not']]}")
    for name in _NON_CPU_BACKENDS:
        for other in sorted(bindir.glob(f"libggml-{name}*.so")):
            ggml.ggml_backend_load(str(other).encode())
    chosen = _variant_name(lib)
    skipped = [r for r in table if r["why_not"] and r["score"] > 0]
    reason = "forced by FANOUT_GGML_CPU" if forced else "highest ggml score among the usable variants"
    if skipped:
        reason += "; skipped " + "; ".join(f"{r['variant']} ({r['why_not']})" for r in skipped)
    _BACKENDS.update(lib=ggml, variant=chosen, candidates=table, reason=reason)
    log.info("ggml CPU backend: %s (%s)", chosen, reason)


def backend_info() -> dict[str, Any]:
    """Which ggml CPU variant this process runs on, why, and llama.cpp's own feature line."""
    load_backends()
    import llama_cpp

    info = {k: v for k, v in _BACKENDS.items() if k != "lib"}
    info["system_info"] = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    return info


def _bindir() -> Path:
    """The wheel's folder of dynamic ggml backends (bin/ beside the llama_cpp package)."""
    import llama_cpp

    return Path(llama_cpp.__file__).resolve().parent.parent / "bin"


def check_gpu_offload(acfg: ActorConfig, role: str) -> None:
    """Refuse to load a model with `n_gpu_layers != 0` when no GPU backend is loaded: llama.cpp would silently
    run every layer on the CPU (a GPU profile on a CPU-only wheel). Says what was asked, what loaded, the fix."""
    if not acfg.n_gpu_layers:
        return
    import llama_cpp

    if llama_cpp.llama_supports_gpu_offload():
        return
    bindir = _bindir()
    gpu_libs = sorted(p.name for n in _NON_CPU_BACKENDS for p in bindir.glob(f"libggml-{n}*.so"))
    info = {k: v for k, v in _BACKENDS.items() if k != "lib"}
    cpu = ", ".join(info.get("variants", [])) or "built in"
    if gpu_libs:
        found = f"the wheel has {', '.join(gpu_libs)} but it did not load ({_load_error(bindir / gpu_libs[0])})"
        fix = ("give this process the NVIDIA driver (libcuda.so.1) and CUDA 13's libcudart.so.13 and "
               "libcublas.so.13 (the CUDA toolkit's lib64, or PyPI's nvidia-cuda-runtime and nvidia-cublas, on "
               "LD_LIBRARY_PATH)")
    else:
        found = f"the llama-cpp-python wheel has CPU backends only ({cpu})"
        fix = ("build the CUDA backend with `FANOUT_GGML_CUDA=1 bash scripts/setup.sh` (nvcc from the system or "
               "CUDA 13 from PyPI; no GPU needed to build)")
    raise GPUBackendMissing(
        f"{role}.n_gpu_layers is {acfg.n_gpu_layers} (offload to a GPU) but no GPU backend is loaded: {found}; "
        f"CPU variant in use: {info.get('variant', '?')}. Either {fix}, or set {role}.n_gpu_layers: 0 to run "
        f"this role on the CPU")


def _load_error(lib: Path) -> str:
    """Why the dynamic loader refuses a backend library (a missing dependency, an unresolved symbol)."""
    import ctypes

    try:
        ctypes.CDLL(str(lib), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as exc:
        return str(exc)
    return "it loads, yet ggml registered no GPU device: is a GPU visible to this process (CUDA_VISIBLE_DEVICES)?"


def load_llama(path: Path, acfg: ActorConfig, role: str = "model", **kwargs: Any):
    """Load a model once; explicit n_threads (Ray sets OMP_NUM_THREADS=1 in fractional workers).

    n_batch / n_ubatch come from the role's config (0 = n_ctx / n_batch) unless given here. A role that asks
    for GPU layers on a process without a GPU backend fails here (check_gpu_offload), never runs on the CPU.
    """
    load_backends()
    check_gpu_offload(acfg, role)
    from llama_cpp import Llama

    n_batch, n_ubatch = acfg.batch_tokens
    kwargs.setdefault("n_batch", n_batch)
    kwargs.setdefault("n_ubatch", n_ubatch)
    with _quiet_stderr():
        return Llama(model_path=str(path), n_ctx=acfg.n_ctx, n_threads=acfg.n_threads,
                     n_threads_batch=acfg.n_threads, n_gpu_layers=acfg.n_gpu_layers, verbose=False, **kwargs)


def render_chat(llm: Llama, messages: list[dict[str, str]]) -> str:
    """Render messages with the GGUF's chat template (ChatML when the file has none), ready to generate."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        log.warning("model has no tokenizer.chat_template; using ChatML")
        return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + \
            "<|im_start|>assistant\n"
    # bos_token "" : llama-cpp-python adds BOS itself when the vocabulary asks for it
    fmt = Jinja2ChatFormatter(template=template, eos_token="", bos_token="", add_generation_prompt=True)
    return fmt(messages=messages).prompt  # type: ignore[arg-type]  # plain dicts are valid messages
