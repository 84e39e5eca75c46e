"""Loading GGUF models with llama-cpp-python, shared by the three actors (imported lazily, in __init__)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from fanout.config import ActorConfig, Config

log = logging.getLogger(__name__)


def file_sha256(path: str | Path) -> str:
    """sha256 of a model file, cached in a sidecar keyed by size and mtime (hashing 300 MB takes ~1 s)."""
    p = Path(path)
    st = p.stat()
    side = p.with_name(p.name + ".sha256.json")
    key = {"size": st.st_size, "mtime": st.st_mtime}
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(side.read_text())
        if data.get("size") == key["size"] and data.get("mtime") == key["mtime"]:
            return str(data["sha256"])
    h = hashlib.sha256()
    with p.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    with contextlib.suppress(OSError):
        side.write_text(json.dumps({**key, "sha256": digest}))
    return digest


def model_path(cfg: Config, role: str) -> Path:
    """Resolve (and if needed provision) the GGUF file configured for `role`."""
    from fanout.models import resolve_model

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


def load_llama(path: Path, acfg: ActorConfig, **kwargs: Any):
    """Load a model once; explicit n_threads (Ray sets OMP_NUM_THREADS=1 in fractional workers)."""
    from llama_cpp import Llama

    with _quiet_stderr():
        return Llama(model_path=str(path), n_ctx=acfg.n_ctx, n_threads=acfg.n_threads,
                     n_threads_batch=acfg.n_threads, n_gpu_layers=acfg.n_gpu_layers, verbose=False, **kwargs)
