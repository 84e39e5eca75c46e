"""Loading GGUF models with llama-cpp-python, shared by the three actors (imported lazily, in __init__)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from fanout.config import ActorConfig, Config
from fanout.models import file_sha256

log = logging.getLogger(__name__)


def model_path(cfg: Config, role: str) -> Path:
    """Resolve (and if needed provision) the GGUF file configured for `role`."""
    from fanout.models import resolve_model

    spec = getattr(cfg.models, role)
    return resolve_model(spec, Path(cfg.models.cache_dir) if cfg.models.cache_dir else None)


def model_id(cfg: Config, role: str) -> str:
    """Cache identity of a role's model: file name and hash prefix (no model load)."""
    p = model_path(cfg, role)
    return f"{p.name}@{file_sha256(p)[:16]}"


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


_BACKENDS: dict[str, Any] = {}


def load_backends() -> None:
    """Load ggml's CPU backend variants (GGML_BACKEND_DL build) once per process; ggml picks the best one.

    llama-cpp-python 0.3.36 never calls `ggml_backend_load_all` (abetlen/llama-cpp-python#2069), so a
    dynamic-backend build has no backend until we do. It must go through `libggml.so.0`, the soname libllama
    links (the wheel's separate `libggml.so` copy would fill a second, unused registry). A build without
    dynamic backends has no `bin/libggml-cpu-*.so`: nothing to do. $FANOUT_GGML_CPU=haswell (or any variant
    name) loads that one variant only, e.g. to check that a machine without AVX-512 works.
    """
    if _BACKENDS:
        return
    import ctypes

    import llama_cpp

    pkg = Path(llama_cpp.__file__).resolve().parent
    libdir, bindir = pkg / "lib", pkg.parent / "bin"
    variants = sorted(bindir.glob("libggml-cpu-*.so"))
    _BACKENDS["variants"] = [v.name for v in variants]
    if not variants or not (libdir / "libggml.so.0").exists():
        return
    ggml = ctypes.CDLL(str(libdir / "libggml.so.0"))
    ggml.ggml_backend_load.restype = ctypes.c_void_p
    ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
    forced = os.environ.get("FANOUT_GGML_CPU", "")
    if forced:
        lib = bindir / f"libggml-cpu-{forced}.so"
        if not lib.exists():
            names = sorted(v.name.removeprefix("libggml-cpu-").removesuffix(".so") for v in variants)
            raise RuntimeError(f"FANOUT_GGML_CPU={forced!r}: no {lib.name}; choose one of {names}")
        if not ggml.ggml_backend_load(str(lib).encode()):
            raise RuntimeError(f"FANOUT_GGML_CPU={forced!r}: {lib} does not load on this CPU")
    else:
        ggml.ggml_backend_load_all_from_path(str(bindir).encode())
    _BACKENDS["lib"] = ggml


def load_llama(path: Path, acfg: ActorConfig, **kwargs: Any):
    """Load a model once; explicit n_threads (Ray sets OMP_NUM_THREADS=1 in fractional workers)."""
    load_backends()
    from llama_cpp import Llama

    with _quiet_stderr():
        return Llama(model_path=str(path), n_ctx=acfg.n_ctx, n_threads=acfg.n_threads,
                     n_threads_batch=acfg.n_threads, n_gpu_layers=acfg.n_gpu_layers, verbose=False, **kwargs)


def render_chat(llm: Any, messages: list[dict[str, str]]) -> str:
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
