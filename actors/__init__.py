"""Model actors: one role per file. Each loads its model once in __init__ and maps pa.Table -> pa.Table."""

ROLES = {
    "embedder": "actors.embedder:Embedder",
    "expander": "actors.expander:QueryExpander",
    "reranker": "actors.reranker:Reranker",
}


def actor_class(role: str) -> type:
    """The class for a role, imported lazily (model libraries load only where an actor lives)."""
    import importlib

    if role not in ROLES:
        raise ValueError(f"unknown actor role {role!r}; choose one of {sorted(ROLES)}")
    mod, name = ROLES[role].split(":")
    return getattr(importlib.import_module(mod), name)
