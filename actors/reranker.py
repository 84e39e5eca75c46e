"""Reranker actor: scores (query, passage) pairs the Qwen3-Reranker way, P("yes") against P("no").

The prompt is rendered with the GGUF's chat template and evaluated in three decode calls: the system turn
(the same for all queries), the instruct + query part (the same for all passages of one query), then the
passage with the end of the turn. With `prefix_reuse` the KV cells of the first two stay in the cache and
only the passage part is decoded; a pair's score does not depend on the batch it came in. With
`rerank.parallel` N > 1 (a GPU profile) a query's passages are decoded N at a time as parallel sequences after
one shared prefix (ParallelScorer): 2.6x the pairs per second on an H200, scores within 0.0005 of the one-by-one
path there; on a CPU they move with the grouping by the noise of a quantized model's decode splits (< 0.07).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import pyarrow as pa
from fanout.actors._llama import load_llama, model_path, render_chat

from fanout.config import Config
from fanout.errors import ModelError
from fanout.models.identity import model_id

log = logging.getLogger(__name__)

SYSTEM = ('Judge whether the Document meets the requirements based on the Query and the Instruct provided. '
          'Note that the answer can only be "yes" or "no".')
USER = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>:{document}"
THINK = "<think>\n\n</think>\n\n"  # the empty think block a thinking model's answer starts with
_DOC = "\x00DOCUMENT\x00"  # sentinel that splits the rendered prompt around the document


class Reranker:
    """`__call__(batch)`: columns query, passage, intent (optional) -> the same plus `_rerank` in 0..1."""

    def __init__(self, cfg: Config, prefix_reuse: bool = True):
        self.cfg = cfg
        self.prefix_reuse = prefix_reuse
        self.path = model_path(cfg, "reranker")
        self.model_id = model_id(cfg, "reranker")
        # logits_all=False: only the last token of each decode gets logits (read with llama_get_logits_ith)
        self.llm = load_llama(self.path, cfg.reranker, "reranker", logits_all=False)
        # Qwen3-Reranker opens the answer with an empty think block; a model whose chat template has no
        # think tokens never saw one (Qwen2.5-Coder-0.5B: MRR 0.41 with it, 0.76 without; see
        # bench/model_calls.py)
        template = str(self.llm.metadata.get("tokenizer.chat_template") or "")
        self.think = THINK if "<think>" in template else ""
        self.yes = self._single_token("yes")
        self.no = self._single_token("no")
        self._parallel: ParallelScorer | None = None  # rerank.parallel > 1: its own context, made on first use
        self.stats: dict[str, int] = {"pairs": 0, "scored": 0, "deduped": 0, "truncated": 0,
                                      "tokens_evaluated": 0, "tokens_reused": 0}

    def _single_token(self, word: str) -> int:
        toks = self.llm.tokenize(word.encode("utf-8"), add_bos=False, special=False)
        if len(toks) != 1:
            log.warning("%r is %d tokens in %s; scoring its first token", word, len(toks), self.path.name)
        return int(toks[0])

    def _tokens(self, text: str, bos: bool = False) -> list[int]:
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=bos, special=True))

    def split_prompt(self, query: str, intent: str | None) -> list[list[int]]:
        """Prompt tokens around the document: [system turn, instruct + query, end of turn + think block].

        The document goes between the 2nd and 3rd part, with a leading space (as whole-prompt tokenization
        would give it).
        """
        instruction = self.cfg.rerank.instruction + (f" Context: {intent}" if intent else "")
        user = USER.format(instruction=instruction, query=query, document=_DOC)
        text = render_chat(self.llm, [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": user}]) + self.think
        head, tail = text.split(_DOC)
        cut = head.index("<Instruct>:")
        return [self._tokens(head[:cut], bos=True), self._tokens(head[cut:]), self._tokens(tail)]

    def passage_tokens(self, passage: str, room: int) -> list[int]:
        """The document's tokens (" " + passage), cut to `room` tokens."""
        toks = list(self.llm.tokenize((" " + passage).encode("utf-8"), add_bos=False, special=False))
        if len(toks) > room:
            self.stats["truncated"] += 1
            toks = toks[:max(0, room)]
        return toks

    def score_segments(self, segments: list[list[int]]) -> float:
        """P(yes) / (P(yes) + P(no)) after the concatenated segments, one decode call per segment.

        Segments already in the KV cache (same tokens at the same positions) are kept when prefix_reuse is
        on; the rest is decoded. The split into decode calls is the same with or without reuse, because on
        CPU a quantized model's logits depend on how tokens are split into decode calls (by up to ~0.07 in
        the score; `bench/model_calls.py --part split`).
        """
        import llama_cpp

        llm = self.llm
        keep, start = 0, 0
        if self.prefix_reuse:
            cached = llm.input_ids[:llm.n_tokens].tolist()
            end = 0
            for i, seg in enumerate(segments[:-1]):
                end += len(seg)
                if cached[end - len(seg):end] != seg or len(cached) < end:
                    break
                keep, start = end, i + 1
        # Llama.eval drops the KV cells from n_tokens on (llama_memory_seq_rm) before decoding
        llm.n_tokens = keep
        for seg in segments[start:]:
            llm.eval(seg)
            self.stats["tokens_evaluated"] += len(seg)
        self.stats["tokens_reused"] += keep
        logits = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return _p_yes(float(logits[self.yes]) - float(logits[self.no]))

    def score(self, query: str, passages: list[str], intent: str | None = None) -> list[float]:
        """Scores of the passages for one query; the query part is evaluated once when prefix_reuse is on."""
        system, head, tail = self.split_prompt(query, intent)
        room = self.cfg.reranker.n_ctx - len(system) - len(head) - len(tail) - 8
        if self.cfg.rerank.parallel > 1:
            if self._parallel is None:
                self._parallel = ParallelScorer(self.llm, self.cfg.rerank.parallel, self.cfg.reranker.n_ctx,
                                                self.cfg.reranker.n_threads)
            docs = [self.passage_tokens(p, room) + tail for p in passages]
            self.stats["tokens_evaluated"] += len(system) + len(head) + sum(map(len, docs))
            return [_p_yes(d) for d in self._parallel.score(system + head, docs, self.yes, self.no)]
        return [self.score_segments([system, head, self.passage_tokens(p, room) + tail]) for p in passages]

    def __call__(self, batch: pa.Table) -> pa.Table:
        return rerank_rows(batch, self.score, self.stats, Exception, self._failed)

    def _failed(self, query: str, docs: list[str], exc: BaseException) -> None:
        self.llm.n_tokens = 0
        log.warning("rerank failed for query %r (%d passages): %s: %s", query, len(docs), type(exc).__name__, exc)


def rerank_rows(batch: pa.Table, score: Callable[[str, list[str], str | None], list[float]],
                stats: dict[str, int], errors: type[BaseException] | tuple[type[BaseException], ...],
                failed: Callable[[str, list[str], BaseException], None]) -> pa.Table:
    """`batch` (query, passage, optional intent) + `_rerank`, each distinct (query, intent) scored once over its
    distinct passages by `score(query, passages, intent)` (rows of one query together: one prefix evaluation
    for a local model, one request for a served one). A query whose scoring raises one of `errors` gets null
    scores, is counted in stats["failed"] and handed to `failed` (one bad query never kills the batch)."""
    queries = batch.column("query").to_pylist()
    passages = [p or "" for p in batch.column("passage").to_pylist()]
    n = len(queries)
    intents = batch.column("intent").to_pylist() if "intent" in batch.column_names else [None] * n
    groups: dict[tuple[str, str | None], dict[str, None]] = {}  # identical pairs scored once
    for q, p, it in zip(queries, passages, intents):
        groups.setdefault((q, it or None), {})[p] = None
    scores: dict[tuple[str, str | None, str], float] = {}
    for (q, it), unique_docs in groups.items():
        docs = list(unique_docs)
        try:
            for p, s in zip(docs, score(q, docs, it)):
                scores[(q, it, p)] = s
        except errors as exc:
            stats["failed"] = stats.get("failed", 0) + len(docs)
            failed(q, docs, exc)
    stats["pairs"] += n
    stats["scored"] += len(scores)
    stats["deduped"] += n - sum(len(d) for d in groups.values())
    col = [scores.get((q, it or None, p)) for q, p, it in zip(queries, passages, intents)]
    return batch.append_column("_rerank", pa.array(col, pa.float64()))


def _p_yes(d: float) -> float:
    """P(yes) / (P(yes) + P(no)) from the logit difference yes - no."""
    return 1.0 / (1.0 + math.exp(-d)) if d > -700 else 0.0


class ParallelScorer:
    """The passages of one query decoded together, `n_seq` at a time, as parallel sequences after one shared
    prefix (`rerank.parallel`). A GPU decodes one short pair far below its width (launch-bound: 134 pairs/s on
    an H200, bench/gpu_check.sh); a batch of sequences fills it. It needs a context with n_seq_max > 1 and
    llama-cpp-python's `Llama` makes one only for embedding models, so this makes its own on the same weights
    (KV cells shared by every sequence: n_seq x n_ctx of them). Scores match the one-by-one path up to the
    numeric noise of splitting tokens into other decode calls (tests/test_reranker.py)."""

    def __init__(self, llm, n_seq: int, n_ctx: int, n_threads: int):
        import llama_cpp

        p = llama_cpp.llama_context_default_params()
        p.n_ctx = p.n_batch = n_seq * n_ctx
        p.n_ubatch = min(p.n_batch, 512)
        p.n_seq_max, p.kv_unified = n_seq, True
        p.n_threads = p.n_threads_batch = n_threads
        self.n_seq, self._lib = n_seq, llama_cpp  # kept for __del__: no imports while Python shuts down
        self._llm = llm  # the weights must outlive this context: freed only after __del__ frees it
        self.ctx = llama_cpp.llama_init_from_model(llm._model.model, p)
        if not self.ctx:
            raise ModelError(f"rerank.parallel {n_seq}: llama.cpp could not make a context of {p.n_ctx} tokens")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(p.n_batch, 0, n_seq)

    def _decode(self, parts: list[tuple[list[int], int, int]]) -> list[int]:
        """Decode (tokens, sequence, first position) parts in one batch; the batch index of each part's last
        token (the only ones whose logits are kept)."""
        import llama_cpp

        b, k, last = self.batch, 0, []
        for toks, seq, pos in parts:
            for j, tok in enumerate(toks):
                b.token[k], b.pos[k], b.n_seq_id[k] = tok, pos + j, 1
                b.seq_id[k][0] = seq
                b.logits[k] = j == len(toks) - 1
                k += 1
            last.append(k - 1)
        b.n_tokens = k
        if rc := llama_cpp.llama_decode(self.ctx, b):
            raise ModelError(f"llama_decode returned {rc} for {len(parts)} parallel sequences of {k} tokens")
        return last

    def score(self, prefix: list[int], docs: list[list[int]], yes: int, no: int) -> list[float]:
        """Logit differences yes - no after prefix + each doc."""
        import llama_cpp

        llama_cpp.llama_memory_clear(self.mem, True)
        self._decode([(prefix, 0, 0)])
        for s in range(1, self.n_seq):
            llama_cpp.llama_memory_seq_cp(self.mem, 0, s, -1, -1)
        out: list[float] = []
        for i in range(0, len(docs), self.n_seq):
            group = docs[i:i + self.n_seq]
            for s, idx in enumerate(self._decode([(d, s, len(prefix)) for s, d in enumerate(group)])):
                logits = llama_cpp.llama_get_logits_ith(self.ctx, idx)
                out.append(float(logits[yes]) - float(logits[no]))
            for s in range(len(group)):
                llama_cpp.llama_memory_seq_rm(self.mem, s, len(prefix), -1)
        return out

    def __del__(self):
        lib = getattr(self, "_lib", None)
        if lib is not None and getattr(self, "batch", None) is not None:
            lib.llama_batch_free(self.batch)
        if lib is not None and getattr(self, "ctx", None):
            lib.llama_free(self.ctx)
