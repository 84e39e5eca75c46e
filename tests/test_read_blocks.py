"""How a Ray Data job's input is cut into blocks (fanout/ray_data.read_blocks): no Ray needed."""

from __future__ import annotations

from fanout.config import load_config
from fanout.ray_data import model_block_rows, read_blocks
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


def test_a_model_pool_gets_its_blocks_cut_as_fine_as_its_actors_need():
    """runner.model_blocks_per_actor: a 16-actor pool's input is cut to ~8 blocks per actor; a pool whose
    read blocks are already that small, a one-actor pool, a CPU stage, or an unknown row count keeps the read
    blocks."""
    cfg = load_config("fake").replace(runner={"model_blocks_per_actor": 8}, embedder={"count": 16})
    emb, cpu = StageSpec(_Stage, pool="embedder", role="embedder"), StageSpec(_Stage, pool="retriever")
    assert model_block_rows(cfg, emb, 1920, 60) == 15  # ceil(1920 / (16 x 8)) rows, below the 60-row read blocks
    assert model_block_rows(cfg, cpu, 1920, 60) == 0
    assert model_block_rows(cfg, emb, 1920, 0) == 0  # blocks unknown (the driver's tables)
    assert model_block_rows(cfg.replace(embedder={"count": 2}), emb, 2000, 125) == 0  # 125 per block: already
    assert model_block_rows(cfg.replace(embedder={"count": 1}), emb, 200, 100) == 0  # one actor takes them all
    assert model_block_rows(cfg.replace(runner={"model_blocks_per_actor": 0}), emb, 1920, 60) == 0
    assert model_block_rows(cfg, emb, 10, 1) == 0  # never below one row
