import pyarrow as pa
import pytest

from fanout.config import FuseConfig
from fanout.schemas import HITS
from pipelines.fuse_rrf import fuse_rrf


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
    cfg = FuseConfig(k=60, w_original=2.0, w_vec=1.0, bonus_first=0.05, bonus_top3=0.02)
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
