"""Model identity: which actor class plays each role, and the cache identity of a role's model file.

A model's identity (file name and sha256) keys every cache and is recorded in the index's manifest, so a model
change invalidates exactly what it should. Imports only the config and fanout/models/files.py (lazily): the
driver resolves identities, so a CPU node never needs a model file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, overload

from fanout.config import Config, ConfigError
from fanout.errors import UserError

# Model roles by import path, per `models.backend`: the base names the actor classes but never imports them
# at module level (layers point one way: actors sit above the runner); the class is imported where the
# actor lives.
BACKENDS = {
    "llama": {
        "embedder": "fanout.actors.embedder:Embedder",
        "expander": "fanout.actors.expander:QueryExpander",
        "reranker": "fanout.actors.reranker:Reranker",
    },
    "fake": {
        "embedder": "fanout.actors.fake:FakeEmbedder",
        "expander": "fanout.actors.fake:FakeExpander",
        "reranker": "fanout.actors.fake:FakeReranker",
    },
    # a role whose spec is `openai:<model>@<base_url>` (role_backend): an HTTP client of that server
    "openai": {
        "embedder": "fanout.actors.served:ServedEmbedder",
        "expander": "fanout.actors.served:ServedExpander",
        "reranker": "fanout.actors.served:ServedReranker",
    },
}
ROLES = BACKENDS["llama"]


def actor_class(role: str, backend: str = "llama") -> type:
    """The class for a role, imported lazily (model libraries load only where an actor lives)."""
    import importlib

    roles = BACKENDS.get(backend)
    if roles is None:
        raise ConfigError(f"unknown models.backend {backend!r}; choose one of {sorted(BACKENDS)}")
    if role not in roles:
        raise UserError(f"unknown actor role {role!r}; choose one of {sorted(roles)}")
    mod, name = roles[role].split(":")
    return getattr(importlib.import_module(mod), name)


def role_backend(cfg: Config, role: str) -> str:
    """Which implementation plays `role`: `fake` (models.backend), `openai` (the role's spec names a server)
    or `llama` (a GGUF file in-process)."""
    if cfg.models.backend == "fake":
        return "fake"
    return "openai" if cfg.served(role) is not None else cfg.models.backend


def model_identity(cfg: Config, role: str, provision: bool = True) -> tuple[str, str]:
    """(file name, sha256) of a role's model, without loading it; the fake backend names itself, a served model
    is `openai:<model>@<host>` with the fingerprint of its probe vectors (embedder) or of its name.

    `provision=False`: never download or assemble a missing model: a recipe the manifest pins is identified
    without its file (`pinned_identity`), anything else must be present (ModelError instead).
    """
    if cfg.models.backend == "fake":
        dim = f"-dim{cfg.fake.dim}" if role == "embedder" else ""
        return f"fake-{role}", f"fake-{role}-v1{dim}"
    if cfg.served(role) is not None:
        from fanout.models.served import served_identity

        return served_identity(cfg, role)
    from fanout.models.files import file_sha256, pinned_identity, resolve_model

    if not provision and (pin := pinned_identity(getattr(cfg.models, role))):
        return pin
    path = resolve_model(getattr(cfg.models, role), Path(cfg.models.cache_dir) if cfg.models.cache_dir else None,
                         provision=provision)
    return path.name, file_sha256(path)


def model_id(cfg: Config, role: str, provision: bool = True) -> str:
    """Cache identity of a role's model: file name and hash prefix (no model load)."""
    name, sha = model_identity(cfg, role, provision)
    return f"{name}@{sha[:16]}"


@overload
def model_key(cfg: Config, role: str, required: Literal[True] = True) -> str: ...
@overload
def model_key(cfg: Config, role: str, required: bool) -> str | None: ...


def model_key(cfg: Config, role: str, required: bool = True) -> str | None:
    """A role's cache identity for a stage that only looks its cache up: from the manifest's pin when it
    has one (no model file on this node), else from the file, provisioned only when `required` (the job
    runs the model anyway); None when the file is absent and not required."""
    from fanout.models.files import ModelError

    try:
        return model_id(cfg, role, provision=False)
    except ModelError:
        if not required:
            return None
        return model_id(cfg, role)
