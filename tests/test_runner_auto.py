"""Which runner auto mode picks, and how many logical CPUs a private local Ray advertises (no Ray started)."""

from __future__ import annotations

import pytest


@pytest.fixture
def cfg():
    from fanout.config import load_config

    return load_config("fake")


def test_auto_stays_in_process_on_a_small_machine_and_uses_ray_when_attached(cfg, monkeypatch):
    from fanout.exec import runner_mode as runner

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 2)
    assert not runner.auto_ray(cfg, 10**6)  # 2 cores: a local Ray adds only its fixed cost
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 16)
    assert runner.auto_ray(cfg, cfg.runner.ray_min_rows) and not runner.auto_ray(cfg, cfg.runner.ray_min_rows - 1)
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 2)
    assert runner.auto_ray(cfg.replace(runner={"ray_address": "10.0.0.1:6379"}), 1)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert runner.auto_ray(cfg, 1)
    assert type(runner.make_runner(cfg, n_rows=10**6, mode="inproc")).__name__ == "Runner"


def test_a_private_local_ray_advertises_what_every_pool_asks_for(cfg, monkeypatch):
    from fanout.exec import ray_runner as runner

    monkeypatch.setattr(runner.os, "cpu_count", lambda: 2)
    # embedder 1 + expander .5 + reranker .5 + 4 retrieval pools x .25 + writer .25 + io .2 = 3.45 -> 4 (a search
    # with --expand --rerank has a retrieval pool before and after each model stage: 3.2 CPUs on the fake profile)
    assert runner.local_cpus(cfg) == 4.0
    big = cfg.replace(embedder={"count": 16, "num_cpus": 1.0})
    assert runner.local_cpus(big) == 19.0  # 16 + 0.5 + 0.5 + 1.0 + 0.25 + 0.2 = 18.45
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 64)
    assert runner.local_cpus(cfg) == 64.0
