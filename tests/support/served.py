"""The config of a served-model profile pointed at the fake server (tests/support/served_server.py)."""

from __future__ import annotations


def served_cfg(url: str, **remote):
    from fanout.config import load_config

    return load_config("local").replace(
        models={"embedder": f"openai:emb@{url}", "expander": f"openai:gen@{url}", "reranker": f"openai:rr@{url}"},
        remote={"backoff_s": 0.01, "max_backoff_s": 0.5, "timeout_s": 1.0, **remote})
