"""Runners: how actor calls are executed. The only module that imports Ray.

Stages call `runner.map(role, table)`; the in-process runner holds one instance per role and loops over
batches, the Ray runner holds `count` Ray actors per role and fans batches out over them. Nothing else differs.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from typing import Any

import pyarrow as pa

from actors import actor_class
from fanout.config import Config

log = logging.getLogger(__name__)


def _batches(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)] or [table]


class Runner:
    """In-process runner: actors are plain objects, created on first use and kept for the runner's life."""

    kind = "inproc"

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._actors: dict[str, Any] = {}
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def actor(self, role: str) -> Any:
        if role not in self._actors:
            t = time.perf_counter()
            self._actors[role] = actor_class(role)(self.cfg)
            self.seconds[f"load_{role}"] = time.perf_counter() - t
        return self._actors[role]

    def map(self, role: str, table: pa.Table) -> pa.Table:
        """Run `table` through the role's actor(s) in batches of `cfg.<role>.batch_size`; order is kept."""
        if table.num_rows == 0:
            return self._empty_result(role, table)
        t = time.perf_counter()
        out = self._map(role, _batches(table, getattr(self.cfg, role).batch_size))
        self.calls[role] = self.calls.get(role, 0) + 1
        self.seconds[role] = self.seconds.get(role, 0.0) + time.perf_counter() - t
        return pa.concat_tables(out)

    def _map(self, role: str, batches: list[pa.Table]) -> list[pa.Table]:
        impl = self.actor(role)
        return [impl(b) for b in batches]

    def _empty_result(self, role: str, table: pa.Table) -> pa.Table:
        return self.actor(role)(table)

    def info(self, role: str, attr: str) -> Any:
        """An attribute of the role's actor (e.g. the embedder's model sha); loads the actor if needed."""
        return getattr(self.actor(role), attr)

    def close(self) -> None:
        self._actors.clear()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Host:
    """Ray actor body: builds the role's class inside the worker and forwards calls."""

    def __init__(self, role: str, cfg: Config):
        self.impl = actor_class(role)(cfg)

    def ready(self) -> bool:
        return True

    def call(self, table: pa.Table) -> pa.Table:
        return self.impl(table)

    def get(self, attr: str) -> Any:
        return getattr(self.impl, attr)


class RayRunner(Runner):
    """Ray runner: attaches to `runner.ray_address` / $RAY_ADDRESS, else starts a quiet private local Ray."""

    kind = "ray"

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        import ray

        self._ray = ray
        self._tmp: str | None = None
        self._owns = False
        address = cfg.runner.ray_address or os.environ.get("RAY_ADDRESS", "")
        if not ray.is_initialized():
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            if address:
                ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            else:
                self._tmp = tempfile.mkdtemp(prefix="fanout-ray-", dir="/tmp")
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                         logging_level="ERROR", object_store_memory=cfg.runner.object_store_mb * 2**20,
                         _temp_dir=self._tmp, configure_logging=False)
            self._owns = True
        self._pools: dict[str, list[Any]] = {}

    def _actors_for(self, role: str) -> list[Any]:
        if role in self._pools:
            return self._pools[role]
        ray = self._ray
        acfg = getattr(self.cfg, role)
        opts: dict[str, Any] = {"num_cpus": acfg.num_cpus, "max_restarts": self.cfg.runner.max_retries,
                                "max_task_retries": self.cfg.runner.max_retries}
        if self.cfg.runner.model_resource:
            opts["resources"] = {self.cfg.runner.model_resource: 1e-3}
        cls = ray.remote(_Host)
        handles = [cls.options(**opts).remote(role, self.cfg) for _ in range(acfg.count)]
        t = time.perf_counter()
        try:
            ray.get([h.ready.remote() for h in handles], timeout=self.cfg.runner.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            for h in handles:
                ray.kill(h)
            need = f"{acfg.count} x num_cpus={acfg.num_cpus}"
            if self.cfg.runner.model_resource:
                need += f" + resource {self.cfg.runner.model_resource!r}"
            raise RuntimeError(
                f"{role} actors could not be placed within {self.cfg.runner.placement_timeout_s:.0f}s "
                f"(asked {need}; cluster has {ray.available_resources()}). Lower {role}.count or "
                f"{role}.num_cpus, or add nodes with those resources.") from None
        self.seconds[f"load_{role}"] = time.perf_counter() - t
        self._pools[role] = handles
        return handles

    def _map(self, role: str, batches: list[pa.Table]) -> list[pa.Table]:
        handles = self._actors_for(role)
        refs = [handles[i % len(handles)].call.remote(b) for i, b in enumerate(batches)]
        return self._ray.get(refs)

    def _empty_result(self, role: str, table: pa.Table) -> pa.Table:
        return self._ray.get(self._actors_for(role)[0].call.remote(table))

    def info(self, role: str, attr: str) -> Any:
        return self._ray.get(self._actors_for(role)[0].get.remote(attr))

    def actor_handles(self, role: str) -> list[Any]:
        """The role's Ray actor handles (tests kill one to check that a batch survives)."""
        return self._actors_for(role)

    def close(self) -> None:
        for handles in self._pools.values():
            for h in handles:
                self._ray.kill(h)
        self._pools.clear()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def make_runner(cfg: Config, n_rows: int = 0, mode: str | None = None) -> Runner:
    """Pick a runner: `mode` (or cfg.runner.mode); auto = Ray when attached or for large batches."""
    mode = mode or cfg.runner.mode
    if mode == "auto":
        attached = bool(cfg.runner.ray_address or os.environ.get("RAY_ADDRESS"))
        mode = "ray" if attached or n_rows >= cfg.runner.ray_min_rows else "inproc"
    return RayRunner(cfg) if mode == "ray" else Runner(cfg)
