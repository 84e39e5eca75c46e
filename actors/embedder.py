"""Embedder actor: holds one embedding GGUF, turns a batch of texts into normalised float32 vectors."""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
from fanout.actors._llama import load_llama, model_path

from fanout.config import Config, ConfigError
from fanout.models.files import file_sha256
from fanout.schemas import QUERY_TEXTS

log = logging.getLogger(__name__)

# The model's own prompt format, per role (REFERENCE.md: qmd's formats).
PROMPTS: dict[str, dict[str, str]] = {
    "embeddinggemma": {"query": "task: search result | query: {text}",
                       "document": "title: {title} | text: {text}"},
    "qwen3": {"query": "Instruct: Retrieve relevant documents for the given query\nQuery: {text}",
              "document": "{title}\n{text}"},
    "e5": {"query": "query: {text}", "document": "passage: {text}"},
    "none": {"query": "{text}", "document": "{text}"},
}


def format_prompt(style: str, role: str, text: str, title: str | None = None) -> str:
    if style not in PROMPTS:
        raise ConfigError(f"models.embed_prompt {style!r} is unknown; choose one of {sorted(PROMPTS)}")
    return PROMPTS[style][role].format(text=text, title=title or "none")


class Embedder:
    """`__call__(batch)` takes columns `text` (+ optional `title`, `role`: query|document) and adds `vector`."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.acfg = cfg.embedder
        self.path = model_path(cfg, "embedder")
        self.model_sha = file_sha256(self.path)
        self.prompt = cfg.models.embed_prompt
        # embed() packs texts into decodes of up to n_batch tokens (one long chunk, or many short queries);
        # non-causal attention needs each decode in one ubatch, so n_ubatch = n_batch
        self.n_batch = self.acfg.batch_tokens[0]
        self.llm = load_llama(self.path, self.acfg, "embedder", embedding=True, n_batch=self.n_batch, n_ubatch=self.n_batch)
        self.dim = int(self.llm.n_embd())
        self.batch_size = self.acfg.batch_size  # texts per embed() call
        self.truncated = 0

    def embed_texts(self, texts: list[str], per_call: int = 0) -> np.ndarray:
        """Embed already-formatted prompts, `per_call` a call (0: embedder.batch_size); returns an (n, dim)
        float32 array of unit vectors."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        limit = self.n_batch  # embed(truncate=True) cuts a text to n_batch tokens
        for t in texts:  # a text shorter than the limit in characters cannot exceed it in tokens
            if len(t) >= limit and len(self.llm.tokenize(t.encode("utf-8"), add_bos=True)) > limit:
                self.truncated += 1
        out = []
        step = max(1, per_call or self.batch_size)
        for i in range(0, len(texts), step):
            out.extend(self.llm.embed(texts[i:i + step], normalize=False, truncate=True))
        arr = np.asarray(out, dtype=np.float32)
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        return arr / np.maximum(norms, 1e-12)

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column("text").to_pylist()
        roles = batch.column("role").to_pylist() if "role" in batch.column_names else ["document"] * len(texts)
        titles = batch.column("title").to_pylist() if "title" in batch.column_names else [None] * len(texts)
        prompts = [format_prompt(self.prompt, r, t, ti) for t, r, ti in zip(texts, roles, titles)]
        # a search's texts come with its embedder.query_batch_size (EmbedVariants): 1 makes a query's vectors
        # the same whatever other texts its batch holds
        per_call = batch.column(QUERY_TEXTS)[0].as_py() if QUERY_TEXTS in batch.column_names and texts else 0
        vecs = self.embed_texts(prompts, per_call or 0)
        col = pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1), pa.float32()), self.dim)
        return batch.append_column("vector", col)
