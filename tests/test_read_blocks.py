"""How a Ray Data job's input is cut into blocks (fanout/ray_data.read_blocks): no Ray needed."""

from __future__ import annotations

from fanout.config import load_config
from fanout.ray_data import read_blocks
from fanout.runner import StageSpec


class _Stage:
    pass


def test_blocks_follow_block_rows_but_feed_every_actor_twice():
    cfg = load_config("fake").replace(runner={"block_rows": 256}, embedder={"count": 4})
    specs = [StageSpec(_Stage, pool="retriever"), StageSpec(_Stage, pool="embedder", role="embedder")]
    assert read_blocks(cfg, specs, 2000, 2) == 8  # ceil(2000 / 256)
    assert read_blocks(cfg, specs, 200, 1) == 8  # two per embedder actor, though 200 rows fit one block
    assert read_blocks(cfg, specs, 5, 1) == 5  # never more blocks than rows
    assert read_blocks(cfg, specs, 2000, 12) == 12  # never fewer than the files read
    assert read_blocks(cfg, specs, 2000, 2, block_rows=8) == 250  # a model-bound job asks for small blocks


def test_a_single_actor_stage_counts_as_one_actor():
    cfg = load_config("fake").replace(runner={"block_rows": 1000}, retriever={"count": 3})
    assert read_blocks(cfg, [StageSpec(_Stage, pool="retriever", single=True)], 2000, 1) == 2
    assert read_blocks(cfg, [StageSpec(_Stage, pool="retriever")], 2000, 1) == 6
