"""Which executor a job gets: the in-process `Runner` or a `RayRunner` (fanout/exec/ray_runner.py, imported only
when chosen). Its own module, so that fanout/exec/runner.py (the stages and the in-process loop, which the Ray
modules build on) never imports them back."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fanout.config import Config
from fanout.exec.runner import Runner

if TYPE_CHECKING:
    from fanout.exec.ray_runner import RayRunner


def attached(cfg: Config) -> bool:
    """Is there a Ray cluster to attach to (runner.ray_address or $RAY_ADDRESS)?"""
    return bool(cfg.runner.ray_address or os.environ.get("RAY_ADDRESS"))


def auto_ray(cfg: Config, n_rows: int) -> bool:
    """auto mode: Ray when attached to a cluster; a private local Ray only for batches of at least
    runner.ray_min_rows on a machine with at least runner.local_ray_min_cores cores (below that it cannot
    add cores, only its fixed cost per job)."""
    if attached(cfg):
        return True
    return n_rows >= cfg.runner.ray_min_rows and (os.cpu_count() or 1) >= cfg.runner.local_ray_min_cores


def job_mode(cfg: Config, mode: str | None = None, rows: int | None = None, path: str | None = None) -> str:
    """Where a job runs, "ray" or "inproc": `mode` (or cfg.runner.mode); auto = `auto_ray` on the job's row
    count, given (`rows`) or counted from the input file `path` by a streaming pass that stops at
    runner.ray_min_rows, and only when the answer depends on it."""
    mode = mode or cfg.runner.mode
    if mode != "auto":
        return mode
    if attached(cfg) or not auto_ray(cfg, 10**18):  # decided without counting
        return "ray" if attached(cfg) else "inproc"
    if rows is None and path is not None:
        from fanout.io.batch_input import read_input

        rows = 0
        for t in read_input(path, cfg.storage):
            rows += t.num_rows
            if rows >= cfg.runner.ray_min_rows:
                break
    return "ray" if auto_ray(cfg, rows or 0) else "inproc"


def make_runner(cfg: Config, n_rows: int = 0, mode: str | None = None) -> Runner | RayRunner:
    """Pick a runner: `mode` (or cfg.runner.mode); auto = `auto_ray`."""
    mode = job_mode(cfg, mode, n_rows)
    if mode != "ray":
        return Runner(cfg)
    from fanout.exec.ray_runner import RayRunner

    return RayRunner(cfg)
