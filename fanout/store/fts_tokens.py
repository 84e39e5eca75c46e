"""A full-text column's postings from its texts (fts_memory.memory_column's build), tokenized with Lance's
tokenizer and counted with numpy: what a dict of token -> (rows, frequencies) filled text by text gives, in the
same order (tokens by first appearance, each token's rows in scan order), at a fraction of the Python work and
memory (the texts' tokens are counted a batch at a time, never held all at once)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

# texts tokenized and counted together: bounds the token strings alive at once (~100 tokens a chunk)
BATCH_TEXTS = 2048


@dataclass
class Postings:
    tokens: list[str]  # by first appearance
    lengths: np.ndarray  # token i's postings are the next lengths[i] entries of rows / freq
    rows: np.ndarray  # int32 positions, ascending per token
    freq: np.ndarray  # int32 term frequencies
    dl: np.ndarray  # uint32 per position: its token count
    n_docs: int  # positions with at least one token (Lance's N)


def build(texts: Iterable[tuple[int, str | None]], args: dict[str, Any], n_rows: int) -> Postings:
    """The postings of `texts` ((position, text) in scan order; empty texts and texts without a token count
    for nothing, as Lance counts them)."""
    import lance

    index: dict[str, int] = {}  # token -> its id, in first-appearance order
    dl = np.zeros(n_rows, np.uint32)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (token id, position, freq) per batch
    docs: list[int] = []
    counts: list[int] = []
    flat: list[str] = []
    last: tuple[str | None, list[str]] = (None, [])  # a note's chunks repeat its title (and a section's heading)

    def flush() -> None:
        if not docs:
            return
        enc = pa.array(flat, pa.string()).dictionary_encode()  # ids by first appearance in the batch
        gid = np.array([index.setdefault(t, len(index)) for t in enc.dictionary.to_pylist()], np.int64)
        n = len(docs)
        key = gid[enc.indices.to_numpy()] * n + np.repeat(np.arange(n, dtype=np.int64), counts)
        pairs, freq = np.unique(key, return_counts=True)  # by token id, then scan order
        parts.append((pairs // n, np.asarray(docs, np.int32)[pairs % n], freq.astype(np.int32)))
        docs.clear()
        counts.clear()
        flat.clear()

    for p, text in texts:
        if not text:
            continue
        if text != last[0]:
            last = (text, [x.text for x in lance.tokenize(text, **args)])
        toks = last[1]
        if not toks:  # Lance counts only documents with a token (N, avgdl)
            continue
        docs.append(p)
        counts.append(len(toks))
        dl[p] = len(toks)
        flat.extend(toks)
        if len(docs) >= BATCH_TEXTS:
            flush()
    flush()
    n_docs = int(np.count_nonzero(dl))
    if not parts:
        return Postings([], np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32), dl, n_docs)
    tok = np.concatenate([t for t, _, _ in parts])
    order = np.argsort(tok, kind="stable")  # batches are in scan order: stable keeps it within a token
    rows = np.concatenate([r for _, r, _ in parts])[order]
    freq = np.concatenate([f for _, _, f in parts])[order]
    return Postings(list(index), np.bincount(tok, minlength=len(index)).astype(np.int64), rows, freq, dl, n_docs)
