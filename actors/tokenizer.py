"""The embedder's tokenizer alone (vocab-only load, no weights): exact prompt token counts for the chunker.

The chunker cuts by an estimate (4 chars/token, Cyrillic 2); this counter makes "a chunk never exceeds the
embedder's context" exact: `chunk_notes(..., count=PromptCounter(cfg), context=cfg.embedder.n_ctx)`.
"""

from __future__ import annotations

import logging
import threading

from fanout.actors._llama import _quiet_stderr, load_backends, model_path
from fanout.actors.embedder import format_prompt

from fanout.config import Config
from fanout.models.served import ServedClient, ServedTokens

log = logging.getLogger(__name__)


class PromptCounter:
    """`counter(text, title)` -> tokens of the document prompt the embedder will see (an upper bound when
    the prompt is short enough that it cannot reach the context anyway: its UTF-8 byte count + BOS)."""

    def __init__(self, cfg: Config):
        load_backends()
        from llama_cpp import Llama

        self.style = cfg.models.embed_prompt
        self.limit = cfg.embedder.n_ctx
        with _quiet_stderr():
            self.llm = Llama(model_path=str(model_path(cfg, "embedder")), vocab_only=True, verbose=False)
        self.counted = 0
        self.lock = threading.Lock()  # shared by index runs of several threads (`shared_counter`)

    def __call__(self, text: str, title: str | None = None) -> int:
        prompt = format_prompt(self.style, "document", text, title).encode("utf-8")
        if len(prompt) + 1 < self.limit:  # a token is at least one byte
            return len(prompt) + 1
        with self.lock:
            self.counted += 1
            return len(self.llm.tokenize(prompt, add_bos=True))


class ServedCounter:
    """PromptCounter's count for a served embedder, by its server's tokenizer (fanout/models/served.py
    ServedTokens): the same chunks as the local model makes of the same notes. Built by `shared_counter` only
    when the server has a tokenize endpoint."""

    def __init__(self, cfg: Config, tokens: ServedTokens, first: int):
        self.style, self.limit, self.tokens = cfg.models.embed_prompt, cfg.embedder.n_ctx, tokens
        self.counted = 0
        self.first = first  # the probe's count: proves the endpoint answers

    def __call__(self, text: str, title: str | None = None) -> int:
        prompt = format_prompt(self.style, "document", text, title)
        size = len(prompt.encode("utf-8"))
        if size + 1 < self.limit:
            return size + 1
        n = self.tokens.count(prompt)
        self.counted += 1
        return n if n is not None else size + 1  # the endpoint went away mid-run: the upper bound


def _served_counter(cfg: Config) -> ServedCounter | None:
    spec = cfg.served("embedder")
    assert spec is not None
    tokens = ServedTokens(ServedClient(spec, cfg.remote, "embedder"))
    first = tokens.count(format_prompt(cfg.models.embed_prompt, "document", "fanout", None))
    return None if first is None else ServedCounter(cfg, tokens, first)


_SHARED: dict[tuple, PromptCounter | ServedCounter | None] = {}
_SHARED_LOCK = threading.Lock()


def shared_counter(cfg: Config) -> PromptCounter | ServedCounter | None:
    """One counter per embedder and prompt format in this process (loading and freeing the tokenizer took ~1.2 s
    of every index run, so each round of `--watch` paid it): the local model's tokenizer, or a served
    embedder's server's (`remote.tokenize: auto`); None when a served embedder's server has no tokenize endpoint
    or `remote.tokenize: estimate` (the chunker's estimate alone)."""
    served = cfg.served("embedder") is not None
    if served and cfg.remote.tokenize == "estimate":
        return None
    key = (cfg.models.embedder, cfg.models.cache_dir, cfg.models.embed_prompt, cfg.embedder.n_ctx)
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = _served_counter(cfg) if served else PromptCounter(cfg)
        return _SHARED[key]
