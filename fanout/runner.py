"""Runners: how actor calls are executed. The only module that imports Ray.

Stages call `runner.map(role, table)`; the in-process runner holds one instance per role and loops over
batches, the Ray runner holds `count` Ray actors per role and fans batches out over them. Nothing else differs.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import time
import warnings
from typing import Any, Self

import pyarrow as pa

from fanout.config import Config

log = logging.getLogger(__name__)


# Model roles by import path: the base names the actor classes but never imports them at module level
# (layers point one way: actors sit above the runner); the class is imported where the actor lives.
ROLES = {
    "embedder": "actors.embedder:Embedder",
    "expander": "actors.expander:QueryExpander",
    "reranker": "actors.reranker:Reranker",
}


def actor_class(role: str) -> type:
    """The class for a role, imported lazily (model libraries load only where an actor lives)."""
    import importlib

    if role not in ROLES:
        raise ValueError(f"unknown actor role {role!r}; choose one of {sorted(ROLES)}")
    mod, name = ROLES[role].split(":")
    return getattr(importlib.import_module(mod), name)


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

    def __enter__(self) -> Self:
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

    def where(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"pid": os.getpid(), "node_id": ctx.get_node_id(), "resources": ctx.get_assigned_resources()}


def _show(resources: dict[str, float]) -> str:
    """Schedulable resources only (no node:<ip> markers, no memory byte counts), e.g. `{CPU: 2, models: 1}`."""
    keep = {k: v for k, v in resources.items()
            if not k.startswith("node:") and k not in ("memory", "object_store_memory")}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(keep.items())) + "}"


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
            with warnings.catch_warnings():
                # Ray forks its node processes; once lancedb is loaded, each fork child warns on our stderr
                # about lancedb's fork support before it execs (harmless: the child runs no lancedb code)
                warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
                if address:
                    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
                else:
                    self._tmp = tempfile.mkdtemp(prefix="fanout-ray-", dir="/tmp")
                    atexit.register(self.close)  # a run that dies before close() still removes its temp dir
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
            raise self._placement_error(role) from None
        self.seconds[f"load_{role}"] = time.perf_counter() - t
        self._pools[role] = handles
        return handles

    def _placement_error(self, role: str) -> RuntimeError:
        """What was asked, what the cluster has, and the likely fix (Ray itself would just wait forever)."""
        ray, rcfg, acfg = self._ray, self.cfg.runner, getattr(self.cfg, role)
        res = rcfg.model_resource
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        need = f"{acfg.count} x num_cpus={acfg.num_cpus:g}" + (f" on nodes with resource {res!r}" if res else "")
        fit = [n for n in nodes if n["Resources"].get("CPU", 0) >= acfg.num_cpus
               and (not res or n["Resources"].get(res, 0) > 0)]
        if res and not any(n["Resources"].get(res, 0) > 0 for n in nodes):
            fix = (f"no node offers resource {res!r}: start model nodes with "
                   f"`ray start ... --resources='{{\"{res}\": 1}}'` or set runner.model_resource: \"\"")
        elif not fit:
            fix = f"no node has {acfg.num_cpus:g} CPUs{' and ' + repr(res) if res else ''}: lower {role}.num_cpus"
        elif acfg.count > (room := sum(int(n["Resources"]["CPU"] // acfg.num_cpus) for n in fit)):
            fix = (f"the fitting nodes hold at most {room} such actors: lower {role}.count or {role}.num_cpus, "
                   f"or add nodes")
        else:
            fix = ("they would fit, so other actors hold those CPUs or loading the models took longer: "
                   "free CPUs (other jobs) or raise runner.placement_timeout_s")
        listing = "; ".join(f"{n['NodeManagerAddress']} {_show(n['Resources'])}" for n in nodes)
        return RuntimeError(
            f"{role} actors could not be placed and started within {rcfg.placement_timeout_s:g}s "
            f"(runner.placement_timeout_s): asked {need}; "
            f"free now {_show(ray.available_resources())}; nodes: {listing}. {fix}.")

    def _submit(self, role: str, batches: list[pa.Table]) -> list[Any]:
        """Send the batches round-robin to the role's actors; the result refs, in batch order."""
        handles = self._actors_for(role)
        return [handles[i % len(handles)].call.remote(b) for i, b in enumerate(batches)]

    def _map(self, role: str, batches: list[pa.Table]) -> list[pa.Table]:
        return self._ray.get(self._submit(role, batches))

    def _empty_result(self, role: str, table: pa.Table) -> pa.Table:
        return self._ray.get(self._actors_for(role)[0].call.remote(table))

    def info(self, role: str, attr: str) -> Any:
        return self._ray.get(self._actors_for(role)[0].get.remote(attr))

    def actor_handles(self, role: str) -> list[Any]:
        """The role's Ray actor handles (tests kill one to check that a batch survives)."""
        return self._actors_for(role)

    def actor_info(self, role: str) -> list[dict[str, Any]]:
        """Per actor of the role: its worker pid, node id and assigned resources (where placement put it)."""
        return self._ray.get([h.where.remote() for h in self._actors_for(role)])

    def kill_actor(self, role: str, index: int = 0) -> None:
        """Kill one actor as a crash would: Ray restarts it and retries its in-flight calls (max_retries)."""
        self._ray.kill(self._actors_for(role)[index], no_restart=False)

    def close(self) -> None:
        if self._ray.is_initialized():  # at interpreter exit Ray's own atexit shutdown may have run first
            for handles in self._pools.values():
                for h in handles:
                    self._ray.kill(h)
        self._pools.clear()
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
            atexit.unregister(self.close)


def make_runner(cfg: Config, n_rows: int = 0, mode: str | None = None) -> Runner:
    """Pick a runner: `mode` (or cfg.runner.mode); auto = Ray when attached or for large batches."""
    mode = mode or cfg.runner.mode
    if mode == "auto":
        attached = bool(cfg.runner.ray_address or os.environ.get("RAY_ADDRESS"))
        mode = "ray" if attached or n_rows >= cfg.runner.ray_min_rows else "inproc"
    return RayRunner(cfg) if mode == "ray" else Runner(cfg)
