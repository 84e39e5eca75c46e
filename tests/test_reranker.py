"""Tests for fanout.actors.reranker with the real local GGUF (Qwen2.5-Coder-0.5B by default), loaded once."""

from __future__ import annotations

import pyarrow as pa
import pytest
from fanout.actors.reranker import Reranker

from fanout.config import Config

pytestmark = pytest.mark.model

# (query, relevant passage, unrelated passage)
PAIRS = [
    ("how do I sync my notes between devices",
     ("Obsidian Sync keeps your notes in sync across all your devices: phone, tablet and computer. "
      "Turn it on under Settings > Sync and choose a remote vault."),
     "Pasta carbonara is made with eggs, pecorino cheese, guanciale and black pepper. Do not add cream."),
    ("how long are backup snapshots kept",
     "Restic runs every night at 02:30 and keeps 7 daily, 4 weekly and 12 monthly snapshots.",
     "The night train from Vienna to Venice leaves at 21:27 and has sleeper cabins for up to six people."),
    ("sourdough starter feeding ratio",
     "Feed the sourdough starter at a 1:5:5 ratio of starter, flour and water every 12 hours.",
     "The UPS keeps the NAS running for about 14 minutes, then shuts it down cleanly."),
    ("как часто делаются резервные копии",
     "Резервное копирование запускается каждую ночь в 02:30, хранятся 7 ежедневных и 4 еженедельных копии.",
     "Сырники жарят на среднем огне по три минуты с каждой стороны, пока они не станут золотистыми."),
]


@pytest.fixture(scope="module")
def reranker() -> Reranker:
    # one thread: on a shared 2-core machine two llama.cpp threads spin-wait on each other (20-30x slower
    # under load, bench/model_calls.py --threads); scores and text do not depend on the thread count
    return Reranker(Config().replace(reranker={"n_threads": 1}))


@pytest.mark.parametrize("query,relevant,unrelated", PAIRS, ids=["sync", "backup", "sourdough", "ru-backup"])
def test_relevant_passage_scores_above_unrelated(reranker: Reranker, query: str, relevant: str,
                                                 unrelated: str) -> None:
    good, bad = reranker.score(query, [relevant, unrelated])
    assert 0.0 <= bad < good <= 1.0, (good, bad)


def test_prefix_reuse_equals_full_evaluation(reranker: Reranker) -> None:
    # Reuse keeps the KV cells of the system turn (shared by all queries) and of the query part (shared by
    # one query's passages); without reuse every pair is decoded from an empty cache. Same numbers means
    # the rewind drops exactly the stale cells and keeps the right ones.
    (q1, a, b), (q2, c, _) = PAIRS[2], PAIRS[1]
    try:
        reranker.prefix_reuse = True
        before = reranker.stats["tokens_reused"]
        reused = reranker.score(q1, [a, b]) + reranker.score(q2, [c])
        assert reranker.stats["tokens_reused"] > before
        reranker.prefix_reuse = False
        full = [reranker.score(q1, [p])[0] for p in (a, b)] + reranker.score(q2, [c])
    finally:
        reranker.prefix_reuse = True
    assert reused == pytest.approx(full, abs=1e-3)


def test_parallel_sequences_score_like_one_by_one(reranker: Reranker) -> None:
    # rerank.parallel decodes a query's passages together in a context of its own; on the CPU a quantized
    # model's logits move a little with how tokens are split into decode calls (up to ~0.07 in the score,
    # bench/model_calls.py --part split), on a GPU the two paths agree within 0.0005 (bench/gpu_check.sh)
    par = Reranker(reranker.cfg.replace(rerank={"parallel": 3}))
    for q, good, bad in PAIRS:
        docs = [good, bad, good[:70], bad]  # more passages than sequences: a second group reuses the prefix
        one, together = reranker.score(q, docs), par.score(q, docs)
        assert together == pytest.approx(one, abs=0.07), (q, one, together)
    assert par.stats["tokens_evaluated"] > 0
    with pytest.raises(ValueError, match="rerank.parallel must be >= 1"):
        reranker.cfg.replace(rerank={"parallel": 0})

def test_batch_call_dedupes_pairs_and_keeps_columns(reranker: Reranker) -> None:
    q, good, bad = PAIRS[1]
    batch = pa.table({"query": [q, q, q], "passage": [good, bad, good], "intent": [None, None, None],
                      "path": ["a.md", "b.md", "a2.md"]})
    before = dict(reranker.stats)
    out = reranker(batch)
    assert out.column_names == ["query", "passage", "intent", "path", "_rerank"]
    assert out.schema.field("_rerank").type == pa.float64()
    s = out.column("_rerank").to_pylist()
    assert s[0] == s[2] and s[0] > s[1]
    assert reranker.stats["scored"] - before["scored"] == 2
    assert reranker.stats["deduped"] - before["deduped"] == 1


def test_prompt_segments_tokenize_like_the_whole_prompt(reranker: Reranker) -> None:
    # the document is tokenized on its own (" " + passage) between the cached parts; check that the
    # concatenation is what tokenizing the whole prompt would give
    # Qwen2.5's template has no think tokens, so no empty think block is added
    assert reranker.think == ""
    system, head, tail = reranker.split_prompt("how do I sync my notes", "obsidian app")
    doc = reranker.passage_tokens(PAIRS[0][1], 500)
    whole = system + head + doc + tail
    text = reranker.llm.detokenize(whole, special=True).decode("utf-8")
    assert "<Query>: how do I sync my notes\n<Document>: Obsidian Sync" in text
    assert "Context: obsidian app" in text and text.endswith("<|im_start|>assistant\n" + reranker.think)
    assert reranker._tokens(text, bos=True) == whole


def test_long_passage_is_truncated_to_the_room_left(reranker: Reranker) -> None:
    before = reranker.stats["truncated"]
    toks = reranker.passage_tokens("word " * 5000, 300)
    assert len(toks) == 300 and reranker.stats["truncated"] == before + 1
