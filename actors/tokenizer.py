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


_SHARED: dict[tuple, PromptCounter] = {}
_SHARED_LOCK = threading.Lock()


def shared_counter(cfg: Config) -> PromptCounter:
    """One PromptCounter per embedder and prompt format in this process: loading and freeing the tokenizer took
    ~1.2 s of every index run, so each round of `--watch` paid it (docs/performance.md#watch-mode)."""
    key = (cfg.models.embedder, cfg.models.cache_dir, cfg.models.embed_prompt, cfg.embedder.n_ctx)
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = PromptCounter(cfg)
        return _SHARED[key]
