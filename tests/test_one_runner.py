"""One setting says where a job runs (runner.mode / --runner) and one interface runs it (`runner.run`): the
retired `runner.engine` and `fanout batch --engine` fail naming what to use instead."""

from __future__ import annotations

import pytest

from fanout.config import ConfigError, load_config


def test_runner_engine_in_a_config_file_fails_naming_runner_mode(tmp_path):
    p = tmp_path / "old.yaml"
    p.write_text("runner:\n  engine: slices\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"runner\.engine is gone.*runner\.mode.*given 'slices'"):
        load_config(str(p))


def test_runner_engine_in_replace_fails_too():
    with pytest.raises(ConfigError, match=r"runner\.engine is gone"):
        load_config("fake").replace(runner={"engine": "data"})


def test_batch_engine_flag_fails_naming_runner(tmp_path, capsys):
    from fanout.cli.main import main

    rc = main(["batch", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "o.parquet"), "--db", str(tmp_path),
               "--engine", "slices"])
    err = capsys.readouterr().err
    assert rc != 0 and "--engine is gone (given 'slices')" in err and "--runner auto|inproc|ray" in err


def test_no_runner_has_an_engine_property():
    from fanout.exec.runner import Runner

    assert not hasattr(Runner(load_config("fake")), "engine")


def test_embed_groups_in_process_makes_one_embedder_call_per_group(fake_runner):
    import pyarrow as pa
    from fanout.pipelines.embed_chunks import embed_groups

    calls = []
    real = fake_runner.map
    fake_runner.map = lambda role, t: calls.append(t.num_rows) or real(role, t)
    try:
        def chunks(n):
            return pa.table({"embed_text": [f"text {i} " * (i + 1) for i in range(n)], "title": ["t"] * n})
        groups = [("a", chunks(3)), ("b", chunks(0)), ("c", chunks(5))]
        out = list(embed_groups(groups, fake_runner, fake_runner.cfg))
    finally:
        fake_runner.map = real
    assert [k for k, _ in out] == ["a", "b", "c"] and [t.num_rows for _, t in out] == [3, 0, 5]
    assert calls == [3, 5] and "_group" not in out[2][1].column_names and "vector" in out[2][1].column_names
