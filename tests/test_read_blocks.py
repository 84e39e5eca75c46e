"""How a Ray Data job's input is cut into blocks (fanout/ray_data.read_blocks), who reads them and who writes the
result parts: no Ray needed."""

from __future__ import annotations

import pytest

from fanout.config import load_config
from fanout.exec.ray_data import model_block_rows, read_blocks
from fanout.exec.runner import StageSpec


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


def test_a_small_job_is_read_by_the_driver_and_its_last_chain_writes_the_parts(tmp_path):
    """runner.driver_read_rows: up to it the driver slices the todo files into the job's blocks (no read task);
    past it None (read tasks). `writing` gives the parts to the last Chain (or appends a one-actor writer after
    a model stage), and `Parts.write_block` writes a block as a part and hands on only counters and rows."""
    import pyarrow as pa
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from fanout.exec.ray_data import driver_tables, writing
    from fanout.exec.runner import Chain
    from fanout.exec.stage_io import STATS_COLUMN, WRITTEN, Parts, RunStats, Source

    todo = tmp_path / "todo.parquet"
    pq.write_table(pa.table({"_row": pa.array(range(600), pa.int64())}), todo)
    cfg = load_config("fake").replace(runner={"block_rows": 256, "driver_read_rows": 1000})
    specs = [StageSpec(_Stage, pool="retriever")]
    src = Source([str(todo)], pafs.LocalFileSystem(), rows=600)
    assert [t.num_rows for t in driver_tables(cfg, specs, src)] == [200, 200, 200]  # 3 blocks of 256 or fewer
    assert driver_tables(cfg.replace(runner={"driver_read_rows": 599}), specs, src) is None
    assert driver_tables(cfg, specs, Source(tables=[pa.table({"_row": [1]})], rows=1)) is None  # held already

    parts = Parts(pafs.LocalFileSystem(), str(tmp_path / "parts"), pa.schema([("_row", pa.int64())]))
    (tmp_path / "parts").mkdir()
    chain = StageSpec(Chain, {"stages": [(_Stage, {})]})
    assert writing([chain], parts)[-1].kwargs["parts"] is parts
    model = StageSpec(_Stage, pool="embedder", role="embedder")
    last = writing([chain, model], parts)[-1]
    assert last.cls is Chain and last.pool == "writer" and last.single and last.kwargs == {"stages": [], "parts": parts}

    block = pa.table({"_row": pa.array([7, 8], pa.int64()),
                      STATS_COLUMN: [RunStats({"S": 1.5}, {"S": {"n": 2}}).to_json(), None]})
    out = parts.write_block(block)
    assert out.schema == WRITTEN and out.num_rows == 1
    assert RunStats.from_json(out[STATS_COLUMN][0].as_py()).counters == {"S": {"n": 2}}
    part = pq.read_table(tmp_path / "parts" / "part-000000000007.parquet")
    assert part.column_names == ["_row"] and part.num_rows == 2  # the block's two rows, in one part


def test_a_pool_starts_no_more_actors_than_the_job_has_calls_for():
    """pool_sizes: the configured count, but at most one actor per call the job has for that pool (its input
    blocks bundled up to its batch size): a 1-query job starts one actor per pool whatever the config."""
    from fanout.exec.ray_data import pool_sizes

    cfg = load_config("fake").replace(embedder={"count": 16, "batch_size": 8}, retriever={"count": 2, "batch_size": 32})
    cpu, emb = StageSpec(_Stage, pool="retriever"), StageSpec(_Stage, pool="embedder", role="embedder")
    specs = [cpu, emb, cpu]
    cuts = [0, 15, 0]  # 1,920 rows read as 60-row blocks, cut to 15 before the embedders
    assert pool_sizes(cfg, specs, cuts, 1920, 60) == [2, 16, 2]
    assert pool_sizes(cfg, specs, [0, 0, 0], 1, 1) == [1, 1, 1]
    assert pool_sizes(cfg, specs, [0, 0, 0], 40, 20) == [2, 2, 2]  # two 20-row blocks
    assert pool_sizes(cfg, specs, [0, 0, 0], 0, 0) == [2, 16, 2]  # rows unknown: the counts
    assert pool_sizes(cfg.replace(runner={"size_pools_to_job": False}), specs, [0, 0, 0], 1, 1) == [2, 16, 2]


def test_model_instances_share_an_actor_and_count_as_its_workers():
    """`instances` (a model pool's models per actor): the input is cut for count x instances models, and a pool
    starts one actor per `instances` calls its job has."""
    from fanout.exec.ray_data import pool_sizes

    cfg = load_config("fake").replace(runner={"model_blocks_per_actor": 8}, embedder={"count": 4, "instances": 4,
                                                                                      "batch_size": 8})
    emb, cpu = StageSpec(_Stage, pool="embedder", role="embedder"), StageSpec(_Stage, pool="retriever")
    assert model_block_rows(cfg, emb, 1920, 60) == 15  # 16 models x 8 blocks, as 16 one-model actors
    assert model_block_rows(cfg.replace(embedder={"count": 1}), emb, 200, 100) == 7  # one actor, four models
    assert pool_sizes(cfg, [cpu, emb], [0, 15], 1920, 60) == [1, 4]
    assert pool_sizes(cfg, [cpu, emb], [0, 8], 40, 8) == [1, 2]  # 5 calls: two actors of four models
    assert pool_sizes(cfg, [cpu, emb], [0, 0], 1, 1) == [1, 1]


@pytest.mark.slow
def test_instances_builds_a_model_only_when_every_built_one_is_busy():
    """fanout/exec/runner.py Instances: the first instance with the actor, another only when a call finds every
    built one busy, never more than `n`; a build that fails leaves the actor with the models it has."""
    import threading

    import pyarrow as pa

    from fanout.exec.runner import Instances

    built: list[int] = []
    gate = threading.Event()

    class Slow:
        fail = False

        def __init__(self, tag: str):
            if Slow.fail:
                raise RuntimeError("no model")
            built.append(len(built))
            self.tag = tag

        def __call__(self, table: pa.Table) -> pa.Table:
            gate.wait(5)
            return table.append_column("tag", pa.array([self.tag] * table.num_rows))

    pool = type("Slow", (Instances,), {"stage": Slow, "n": 3})(tag="x")
    assert built == [0]
    t = pa.table({"a": [1]})
    assert pool(t).column("tag").to_pylist() == ["x"] and built == [0]  # one call at a time: one model
    threads = [threading.Thread(target=pool, args=(t,)) for _ in range(5)]
    for th in threads:
        th.start()
    for _ in range(100):  # five calls at once: three models, two calls waiting for one
        if len(built) == 3:
            break
        threading.Event().wait(0.02)
    gate.set()
    for th in threads:
        th.join()
    assert built == [0, 1, 2] and pool.built == 3

    lazy = type("Slow", (Instances,), {"stage": Slow, "n": 2})
    p2 = lazy(tag="y")
    Slow.fail = True
    held = p2._take()  # the only built instance, now busy: the next call builds, and that build fails
    threading.Timer(0.2, lambda: p2.free.put(held)).start()
    assert p2(t).column("tag").to_pylist() == ["y"]  # answered by the built one once it is free
    assert p2.built == p2.n == 1  # and the pool stops growing
