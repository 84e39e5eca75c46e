import pyarrow as pa
import pytest
from fanout.pipelines.fuse_rrf import fuse_rrf

from fanout.config import FuseConfig
from fanout.schemas import HITS


def hits(rows):
    keys = ["qid", "vid", "kind", "lane", "path", "chunk_id", "_rank", "_score"]
    return pa.Table.from_pylist([dict(zip(keys, r)) for r in rows], schema=HITS)


def test_original_lists_count_double_and_bonus_applies_once():
    cfg = FuseConfig(k=60, w_original=2.0, w_lex=1.0, fts_scale=1.0, bonus_first=0.05, bonus_top3=0.02)
    t = hits([
        ("q", 0, "orig", "fts", "A", "A#0", 1, 9.0),
        ("q", 0, "orig", "fts", "B", "B#1", 2, 5.0),
        ("q", 1, "lex", "fts", "B", "B#0", 1, 7.0),
        ("q", 1, "lex", "fts", "A", "A#2", 2, 6.0),
    ])
    out = {r["path"]: r for r in fuse_rrf(t, cfg).to_pylist()}
    # A: 2/61 + 1/62 + first-place bonus; B: 2/62 + 1/61 + first-place bonus (rank 1 in the lex list)
    assert out["A"]["_rrf"] == pytest.approx(2 / 61 + 1 / 62 + 0.05)
    assert out["B"]["_rrf"] == pytest.approx(2 / 62 + 1 / 61 + 0.05)
    assert out["A"]["_rank"] == 1  # the original query's weight decides the tie-like case
    assert out["A"]["chunk_id"] == "A#0" and out["B"]["chunk_id"] == "B#1"  # chunk of the best list


def test_top3_bonus_and_normalised_score():
    cfg = FuseConfig(k=60, w_original=2.0, w_vec=1.0, bonus_first=0.05, bonus_top3=0.02, calibrate=False)
    t = hits([
        ("q", 0, "orig", "vec", "A", "A#0", 1, 0.9),
        ("q", 0, "orig", "vec", "C", "C#0", 3, 0.7),
        ("q", 1, "vec", "vec", "A", "A#0", 1, 0.8),
    ])
    out = {r["path"]: r for r in fuse_rrf(t, cfg).to_pylist()}
    assert out["C"]["_rrf"] == pytest.approx(2 / 63 + 0.02)
    # A is first in every list: normalised score 1.0 (the best any page could reach)
    assert out["A"]["_norm"] == pytest.approx(1.0)
    assert out["C"]["_norm"] == pytest.approx((2 / 63 + 0.02) / (3 / 61 + 0.05))


def test_alias_lane_weight_and_query_order_kept():
    cfg = FuseConfig(w_alias=3.0, bonus_first=0.0, bonus_top3=0.0)
    t = hits([("b", 0, "orig", "alias", "X", "X#0", 1, 1.0), ("a", 0, "orig", "fts", "Y", "Y#0", 1, 1.0)])
    out = fuse_rrf(t, cfg, qids=["b", "a", "missing"]).to_pylist()
    assert [r["qid"] for r in out] == ["b", "a"]
    assert out[0]["_rrf"] == pytest.approx(3.0 / 61)


def variants(rows):
    from fanout.schemas import VARIANTS

    keys = ["qid", "vid", "kind", "text", "source"]
    return pa.Table.from_pylist([dict(zip(keys, r)) for r in rows], schema=VARIANTS)


def test_sent_lists_follow_the_routing():
    from fanout.pipelines.fuse_rrf import sent_lists

    v = variants([("q", 0, "orig", "x", "query"), ("q", 1, "lex", "x", "agent"), ("q", 2, "hyde", "x", "agent")])
    got = {(r["vid"], r["lane"]) for r in sent_lists(v, ("fts", "vec", "alias")).to_pylist()}
    assert got == {(0, "fts"), (0, "vec"), (0, "alias"), (1, "fts"), (1, "alias"), (2, "vec")}
    assert {r["lane"] for r in sent_lists(v, ("vec",)).to_pylist()} == {"vec"}


def test_a_lone_vector_hit_no_longer_scores_one_when_full_text_was_asked_too():
    # issue 13: "qwxzv plorf zzzt" found nothing in full text, one vector hit at cosine 0.26 -> was 1.000
    from fanout.pipelines.fuse_rrf import sent_lists

    cfg = FuseConfig(k=60, w_original=2.0, fts_scale=0.5, bonus_first=0.05, calibrate=False)
    t = hits([("q", 0, "orig", "vec", "A", "A#0", 1, 0.26)])
    assert fuse_rrf(t, cfg).to_pylist()[0]["_norm"] == pytest.approx(1.0)  # old: lists that returned
    sent = sent_lists(variants([("q", 0, "orig", "qwxzv plorf zzzt", "query")]), ("fts", "vec", "alias"))
    out = fuse_rrf(t, cfg, sent=sent).to_pylist()[0]
    # denominator: first in the vec list (2/61) and in the fts list (2 x 0.5 / 61) + bonus; alias did not hit
    assert out["_norm"] == pytest.approx((2 / 61 + 0.05) / (3 / 61 + 0.05))


def test_evidence_scales_a_query_without_changing_its_order():
    cfg = FuseConfig(cos_floor=0.3, cos_full=0.6, bm25_floor=2.0, bm25_full=12.0)
    rows = [("weak", 0, "orig", "vec", "A", "A#0", 1, 0.36), ("weak", 0, "orig", "vec", "B", "B#0", 2, 0.35),
            ("strong", 0, "orig", "vec", "A", "A#0", 1, 0.70), ("strong", 0, "orig", "vec", "B", "B#0", 2, 0.6)]
    raw = {(r["qid"], r["path"]): r for r in fuse_rrf(hits(rows), FuseConfig(calibrate=False)).to_pylist()}
    cal = {(r["qid"], r["path"]): r for r in fuse_rrf(hits(rows), cfg).to_pylist()}
    for key in raw:  # same order, same rrf
        assert cal[key]["_rank"] == raw[key]["_rank"] and cal[key]["_rrf"] == raw[key]["_rrf"]
    # weak: best cosine 0.36 -> evidence (0.36 - 0.3) / 0.3 = 0.2; strong: 0.70 >= 0.6 -> 1.0
    assert cal[("weak", "A")]["_norm"] == pytest.approx(raw[("weak", "A")]["_norm"] * 0.2)
    assert cal[("strong", "B")]["_norm"] == pytest.approx(raw[("strong", "B")]["_norm"])


def test_bm25_strength_or_an_alias_match_is_evidence_too():
    cfg = FuseConfig(cos_floor=0.3, cos_full=0.6, bm25_floor=2.0, bm25_full=12.0)
    t = hits([("b", 0, "orig", "fts", "A", "A#0", 1, 7.0), ("b", 0, "orig", "vec", "A", "A#0", 1, 0.1),
              ("a", 0, "orig", "alias", "X", "X#0", 1, 1.0), ("a", 0, "orig", "vec", "X", "X#0", 1, 0.1)])
    out = {r["qid"]: r for r in fuse_rrf(t, cfg).to_pylist()}
    raw = {r["qid"]: r for r in fuse_rrf(t, FuseConfig(calibrate=False)).to_pylist()}
    assert out["b"]["_norm"] == pytest.approx(raw["b"]["_norm"] * 0.5)  # BM25 7 -> (7 - 2) / 10
    assert out["a"]["_norm"] == pytest.approx(raw["a"]["_norm"])  # exact title/alias: full evidence
