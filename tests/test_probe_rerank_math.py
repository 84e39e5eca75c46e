import pytest
from fanout.pipelines.probe_bm25 import normalise, strong_signal
from fanout.pipelines.rerank_candidates import best_passage, blend_weight


def test_probe_fires_only_when_top_is_high_and_clearly_ahead():
    # normalise(x) = x / (1 + x): 9 -> 0.9, 2 -> 0.667, 8 -> 0.889
    assert normalise(9.0) == pytest.approx(0.9)
    assert strong_signal([{"_score": 9.0}, {"_score": 2.0}], 0.85, 0.15)
    assert not strong_signal([{"_score": 9.0}, {"_score": 8.0}], 0.85, 0.15)  # gap 0.011
    assert not strong_signal([{"_score": 3.0}], 0.85, 0.15)  # top 0.75
    assert not strong_signal([], 0.85, 0.15)


def test_blend_bands():
    assert [blend_weight(r, (0.75, 0.6, 0.4)) for r in (1, 3, 4, 10, 11)] == [0.75, 0.75, 0.6, 0.6, 0.4]


def test_best_passage_picks_the_lines_with_query_terms():
    text = "\n".join(["Unrelated words here."] * 20 + ["Version history keeps every file for 12 months."]
                     + ["More filler text."] * 20)
    p = best_passage(text, "how long is version history kept", 20)
    assert "Version history" in p and len(p) < 200


def test_a_snippet_is_never_only_a_heading_and_prefers_query_or_short_query_terms():
    from fanout.pipelines.rerank_candidates import query_keys, snippet

    long_line = "Brownout mode " + "lowers the sync rate when the server is busy, " * 12
    text = "## Brownout\n" + long_line  # the heading, then one line longer than the window
    s = snippet(text, query_keys("why is sync slow"), 60, 300)
    assert not s.startswith("#") and s.startswith("Brownout mode lowers") and len(s) <= 300
    # no query term anywhere: still the first body line, not the heading
    assert snippet(text, query_keys("unrelated words"), 60, 300).startswith("Brownout mode")
    # the agent's short_query decides when the query's own words are not in the text
    text = "## Setup\nFirst configure the vault folder.\n\nThen pick the remote vault.\n\nEnd-to-end encryption " \
           "protects the data."
    assert "encryption" in snippet(text, query_keys("is my data safe", "encryption"), 8, 300)
    # a term far into an over-long line: the cut moves to it
    far = "word " * 200 + "attachments folder holds images " + "word " * 50
    assert "attachments" in snippet(far, query_keys("attachments"), 60, 120)
    # a chunk that is only a heading keeps it (nothing else to show)
    assert snippet("## Only", query_keys("x"), 60, 300) == "## Only"


def test_best_passage_sliding_window_picks_what_every_window_scored_alone_picks():
    """`best_passage` moves one window along the lines; it must pick the lines that scoring every start's
    window from scratch picks (the most distinct terms, then hits, the first start among equals)."""
    import random

    from fanout.pipelines.passages import _focus, _split_lines, query_keys

    def reference(text: str, query: str, max_tokens: int) -> str:
        split = _split_lines(text)
        if split is None:
            return text.strip()
        lines, toks, stems = split
        qk = query_keys(query)
        found = [[k for k in st if k in qk] for st in stems]
        best, best_i, best_j = (-1, -1), 0, 1
        for i in range(len(lines)):
            size, j, seen, hits = 0, i, set(), 0
            while j < len(lines) and (j == i or size + toks[j] <= max_tokens):
                size += toks[j]
                seen.update(found[j])
                hits += len(found[j])
                j += 1
            if (len(seen), hits) > best:
                best, best_i, best_j = (len(seen), hits), i, j
        return _focus("\n".join(lines[best_i:best_j]), qk, max_tokens * 6)

    rnd = random.Random(5)
    words = ["sync", "vault", "notes", "plugin", "graph", "the", "settings", "backup", "canvas", "links",
             "## Heading", "theme", "файлы", "заметки"]
    for _ in range(400):
        text = "\n".join(" ".join(rnd.choice(words) for _ in range(rnd.randint(0, 30)))
                         for _ in range(rnd.randint(0, 25)))
        query = " ".join(rnd.sample(words, rnd.randint(1, 4)))
        for max_tokens in (5, 20, 60, 200):
            assert best_passage(text, query, max_tokens) == reference(text, query, max_tokens), (text, query)
