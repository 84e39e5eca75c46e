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
