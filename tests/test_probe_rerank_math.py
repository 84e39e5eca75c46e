import pytest

from pipelines.probe_bm25 import normalise, strong_signal
from pipelines.rerank_candidates import best_passage, blend_weight


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
