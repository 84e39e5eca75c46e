"""Runners: how stages and actor calls are executed. The only module that imports Ray.

A pipeline is a list of `StageSpec`s (a callable class over pa.Table plus its constructor kwargs and the
config section that sizes its pool). Three executors run the same list:

- `Runner.pipeline(specs)`: the in-process loop (single queries, MCP, tests, small batches); model stages
  call `runner.map(role, table)` on actors held by the runner (one instance per role).
- `RayRunner.pipeline(specs)`: the same loop in the driver with model calls fanned out to Ray actors (the
  pre-Ray-Data engine, `runner.engine: slices`; kept for comparison in bench/scale_curve.py).
- `RayRunner.run_dataset(specs, ...)`: ONE Ray Data Dataset: read parquet -> `map_batches` per stage (each an
  actor pool sized by its config section) -> write parquet parts (or stream small rows back).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import pyarrow as pa

from fanout.config import Config

log = logging.getLogger(__name__)


# Model roles by import path, per `models.backend`: the base names the actor classes but never imports them
# at module level (layers point one way: actors sit above the runner); the class is imported where the
# actor lives.
BACKENDS = {
    "llama": {
        "embedder": "actors.embedder:Embedder",
        "expander": "actors.expander:QueryExpander",
        "reranker": "actors.reranker:Reranker",
    },
    "fake": {
        "embedder": "actors.fake:FakeEmbedder",
        "expander": "actors.fake:FakeExpander",
        "reranker": "actors.fake:FakeReranker",
    },
}
ROLES = BACKENDS["llama"]


def actor_class(role: str, backend: str = "llama") -> type:
    """The class for a role, imported lazily (model libraries load only where an actor lives)."""
    import importlib

    roles = BACKENDS.get(backend)
    if roles is None:
        raise ValueError(f"unknown models.backend {backend!r}; choose one of {sorted(BACKENDS)}")
    if role not in roles:
        raise ValueError(f"unknown actor role {role!r}; choose one of {sorted(roles)}")
    mod, name = roles[role].split(":")
    return getattr(importlib.import_module(mod), name)


def model_identity(cfg: Config, role: str, provision: bool = True) -> tuple[str, str]:
    """(file name, sha256) of a role's model, without loading it; the fake backend names itself.

    `provision=False`: never download or assemble a missing model (ModelError instead).
    """
    if cfg.models.backend == "fake":
        dim = f"-dim{cfg.fake.dim}" if role == "embedder" else ""
        return f"fake-{role}", f"fake-{role}-v1{dim}"
    from fanout.models import file_sha256, resolve_model

    path = resolve_model(getattr(cfg.models, role), Path(cfg.models.cache_dir) if cfg.models.cache_dir else None,
                         provision=provision)
    return path.name, file_sha256(path)


def model_id(cfg: Config, role: str, provision: bool = True) -> str:
    """Cache identity of a role's model: file name and hash prefix (no model load)."""
    name, sha = model_identity(cfg, role, provision)
    return f"{name}@{sha[:16]}"


def _batches(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)] or [table]


@dataclass(frozen=True)
class StageSpec:
    """One stage of a pipeline: `cls(**kwargs)` once per worker, then `instance(table) -> table` per batch.

    `pool` names the config section (an ActorConfig) that sizes the stage's Ray Data actor pool: `count`,
    `num_cpus`, `num_gpus` (when `n_gpu_layers` is set), `batch_size`. A stage with a model `role` gets the
    runner as `runner=` in-process (so the runner's actors are reused) and builds its own in a Ray worker.
    `batch_rows` overrides the rows (queries) per call; `single` forces one actor (the cache writer).
    """

    cls: type
    kwargs: dict[str, Any] = field(default_factory=dict)
    pool: str = "retriever"
    role: str | None = None
    batch_rows: int | None = None
    single: bool = False

    @property
    def name(self) -> str:
        return self.cls.__name__


class Chain:
    """Consecutive CPU stages of one pool run as ONE Ray Data actor pool (fewer pools, fewer CPUs held):
    `stages` is a list of (class, kwargs); each is built once per actor and called in order."""

    def __init__(self, stages: list[tuple[type, dict[str, Any]]]):
        self.stages = [cls(**kw) for cls, kw in stages]

    def __call__(self, table: pa.Table) -> pa.Table:
        for stage in self.stages:
            table = stage(table)
        return table


def fuse_specs(specs: list[StageSpec]) -> list[StageSpec]:
    """Merge runs of consecutive non-model, non-single stages of the same pool into one Chain stage."""
    out: list[StageSpec] = []
    run: list[StageSpec] = []

    def close() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append(StageSpec(Chain, {"stages": [(s.cls, s.kwargs) for s in run]}, pool=run[0].pool,
                                 batch_rows=run[0].batch_rows))
        run.clear()

    for s in specs:
        if s.role or s.single:
            close()
            out.append(s)
        else:
            if run and run[-1].pool != s.pool:
                close()
            run.append(s)
    close()
    return out


class Pipeline:
    """Stage instances built once; `__call__(table)` runs them in order and times each (in-process loop)."""

    def __init__(self, specs: list[StageSpec], runner: Runner):
        self.specs = specs
        self.stages = []
        for s in specs:
            kw = dict(s.kwargs)
            if s.role:
                kw["runner"] = runner
            self.stages.append(s.cls(**kw))
        self.seconds: dict[str, float] = {}

    def __call__(self, table: pa.Table) -> pa.Table:
        for spec, stage in zip(self.specs, self.stages):
            t = time.perf_counter()
            table = stage(table)
            self.seconds[spec.name] = self.seconds.get(spec.name, 0.0) + time.perf_counter() - t
        return table

    def stats(self) -> dict[str, dict[str, int]]:
        """Per-stage counters (datatrove's stat_update): each stage's `stats` dict."""
        return {spec.name: dict(getattr(stage, "stats", {})) for spec, stage in zip(self.specs, self.stages)}

    def run(self, tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for t in tables:
            yield self(t)


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
            self._actors[role] = actor_class(role, self.cfg.models.backend)(self.cfg)
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

    def pipeline(self, specs: list[StageSpec]) -> Pipeline:
        """The in-process executor of a stage list (model calls through this runner's actors)."""
        return Pipeline(specs, self)

    def close(self) -> None:
        self._actors.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Host:
    """Ray actor body: builds the role's class inside the worker and forwards calls."""

    def __init__(self, role: str, cfg: Config):
        self.impl = actor_class(role, cfg.models.backend)(cfg)

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


def _placement(cfg: Config, section: str, model: bool) -> dict[str, Any]:
    """Ray options that place one actor of a pool: GPUs when `n_gpu_layers` is set, the model resource."""
    acfg = getattr(cfg, section)
    opts: dict[str, Any] = {}
    if acfg.n_gpu_layers:
        opts["num_gpus"] = acfg.num_gpus
    if model and cfg.runner.model_resource:
        opts["resources"] = {cfg.runner.model_resource: 1e-3}
    return opts


# Runs beside a driver that started a private local Ray: when the driver dies (even kill -9) its end of the
# pipe closes, and this process kills what is left of that Ray (every process whose command line names the
# private temp dir) and removes the dir, so nothing outlives the driver by more than a few seconds.
_WATCHDOG = r"""
import os, shutil, signal, sys, time
tmp = sys.argv[1]
sys.stdin.read()
def ours():
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            try:
                if tmp in open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace"):
                    out.append(int(p))
            except OSError:
                pass
    return out
for sig in (signal.SIGTERM, signal.SIGKILL):
    for p in ours():
        try:
            os.kill(p, sig)
        except OSError:
            pass
    deadline = time.time() + 2
    while ours() and time.time() < deadline:
        time.sleep(0.1)
shutil.rmtree(tmp, ignore_errors=True)
"""


def _start_watchdog(tmp: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WATCHDOG, tmp], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


class RayRunner(Runner):
    """Ray runner: attaches to `runner.ray_address` / $RAY_ADDRESS, else starts a quiet private local Ray."""

    kind = "ray"

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        import ray

        self._ray = ray
        self._tmp: str | None = None
        self._watchdog: subprocess.Popen | None = None
        self._pools: dict[str, list[Any]] = {}
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
                    self._watchdog = _start_watchdog(self._tmp)
                    for attempt in (1, 2):  # Ray gives its raylet 30 s; an overloaded box can miss that once
                        try:
                            ray.init(num_cpus=local_cpus(cfg), include_dashboard=False, log_to_driver=False,
                                     logging_level="ERROR", configure_logging=False, _temp_dir=self._tmp,
                                     object_store_memory=cfg.runner.object_store_mb * 2**20)
                            break
                        except Exception as e:
                            if attempt == 2 or "timed out during startup" not in str(e):
                                raise
                            log.warning("local Ray did not start in time (%s); trying once more", e)
                            with contextlib.suppress(Exception):
                                ray.shutdown()
            self._owns = True

    def _actors_for(self, role: str) -> list[Any]:
        if role in self._pools:
            return self._pools[role]
        ray = self._ray
        acfg = getattr(self.cfg, role)
        opts: dict[str, Any] = {"num_cpus": acfg.num_cpus, "max_restarts": self.cfg.runner.max_retries,
                                "max_task_retries": self.cfg.runner.max_retries}
        opts.update(_placement(self.cfg, role, model=True))
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

    def _placement_error(self, role: str, model: bool = True) -> RuntimeError:
        """What was asked, what the cluster has, and the likely fix (Ray itself would just wait forever)."""
        ray, rcfg, acfg = self._ray, self.cfg.runner, getattr(self.cfg, role)
        res = rcfg.model_resource if model else ""
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        need = f"{acfg.count} x num_cpus={acfg.num_cpus:g}" + (f" on nodes with resource {res!r}" if res else "")
        fit = [n for n in nodes if n["Resources"].get("CPU", 0) >= acfg.num_cpus
               and (not res or n["Resources"].get(res, 0) > 0)]
        if res and not any(n["Resources"].get(res, 0) > 0 for n in nodes):
            fix = (f"no node offers resource {res!r}: start model nodes with "
                   f"`ray start ... --resources='{{\"{res}\": 1}}'` or set runner.model_resource: \"\"")
        elif acfg.n_gpu_layers and not any(n["Resources"].get("GPU", 0) >= acfg.num_gpus for n in nodes):
            fix = (f"{role}.n_gpu_layers is set, so each actor asks for {acfg.num_gpus:g} GPU, and no node has "
                   f"one: set {role}.n_gpu_layers: 0 or add GPU nodes")
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

    # -- Ray Data: one Dataset per job ----------------------------------------------------------------
    def check_fits(self, specs: list[StageSpec]) -> None:
        """Fail fast when a stage's actor pool cannot be placed (Ray Data would wait for it forever).

        Each pool must fit on the nodes that offer what one of its actors asks for, and all pools together
        must fit in the cluster's CPUs; otherwise the same message as for the model actors is raised.
        """
        ray = self._ray
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        total_cpu = sum(n["Resources"].get("CPU", 0) for n in nodes)
        want = 0.0
        for spec in specs:
            acfg = getattr(self.cfg, spec.pool)
            count = 1 if spec.single else acfg.count
            opts = _placement(self.cfg, spec.pool, model=spec.role is not None)
            res = next(iter(opts.get("resources", {})), "")
            fit = [n for n in nodes if n["Resources"].get("CPU", 0) >= acfg.num_cpus
                   and n["Resources"].get("GPU", 0) >= opts.get("num_gpus", 0)
                   and (not res or n["Resources"].get(res, 0) > 0)]
            room = sum(int(n["Resources"]["CPU"] // acfg.num_cpus) for n in fit)
            if count > room:
                raise self._placement_error(spec.pool, model=spec.role is not None)
            want += count * acfg.num_cpus
        want += 0.2  # a read and a write task
        if want > total_cpu + 1e-9:
            raise RuntimeError(
                f"the pipeline's actor pools ask for {want:g} CPUs together ({', '.join(_pool_list(self.cfg, specs))})"
                f" but the cluster has {total_cpu:g}: Ray Data would wait forever. Lower the pools' count or "
                f"num_cpus (fractional is fine: sleep-bound or GPU actors need little CPU), or add nodes.")

    def _map_opts(self, spec: StageSpec) -> dict[str, Any]:
        import ray.data

        acfg = getattr(self.cfg, spec.pool)
        opts: dict[str, Any] = {
            "batch_format": "pyarrow", "batch_size": spec.batch_rows or acfg.batch_size,
            "fn_constructor_kwargs": spec.kwargs, "num_cpus": acfg.num_cpus,
            "compute": ray.data.ActorPoolStrategy(size=1 if spec.single else acfg.count),
        }
        opts.update(_placement(self.cfg, spec.pool, model=spec.role is not None))
        return opts

    def dataset(self, specs: list[StageSpec], paths: list[str] | None = None, filesystem: Any = None,
                progress: bool = False, tables: list[pa.Table] | None = None, preserve_order: bool = False,
                rows: int = 0) -> Any:
        """ONE Dataset: read parquet `paths` (or `tables` held by the driver) -> map_batches per stage (actor
        pools). Lazy: nothing runs until it is written or iterated.

        `rows` (the input's row count, when known) splits the read into blocks of the first stage's batch:
        a todo file holds up to 1,024 rows and one block reaches one actor, so without the split a
        1,000-row job would keep one retrieval actor and one embedder busy however many there are."""
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.execution_options.preserve_order = preserve_order
        ctx.enable_progress_bars = progress  # a bar only on a TTY; no INFO flood otherwise
        ctx.print_on_execution_start = False
        if hasattr(ctx, "enable_operator_progress_bars"):
            ctx.enable_operator_progress_bars = False
        if hasattr(ctx, "op_resource_reservation_enabled"):
            # Ray Data's per-operator reservations split what the actor pools leave free; on a small
            # cluster the read tasks then get less than one task's CPUs and the job never starts
            ctx.op_resource_reservation_enabled = False
        if hasattr(ctx, "use_datasource_v2"):
            # Ray 2.60's DataSourceV2 read_parquet adds a ListFiles task that asks for a whole CPU whatever
            # the read's num_cpus; with the actor pools holding all but a fraction of the cluster it is never
            # scheduled and the job sits with idle pools and no rows (measured: the stall of issue 9)
            ctx.use_datasource_v2 = False
        if hasattr(ctx, "wait_for_min_actors_s"):  # the fit check above catches most; never wait forever
            ctx.wait_for_min_actors_s = int(self.cfg.runner.placement_timeout_s)
        ctx.verbose_stats_logs = False
        for name in ("ray.data", "ray.data._internal"):
            logging.getLogger(name).setLevel(logging.ERROR)
        # a small job (fewer blocks than a pool has actors) is not worth a warning per pool
        warnings.filterwarnings("ignore", message="The minimum number of concurrent actors", category=UserWarning)
        specs = fuse_specs(specs)
        self.check_fits(specs)
        io_cpus = 0.1  # read/write tasks must not wait behind the actor pools (ray#44687)
        if tables is not None:
            ds = ray.data.from_arrow(tables)
        else:
            first = specs[0].batch_rows or getattr(self.cfg, specs[0].pool).batch_size if specs else 1
            blocks = max(len(paths), -(-rows // max(1, first))) if rows else None
            ds = ray.data.read_parquet(paths, filesystem=filesystem, num_cpus=io_cpus, override_num_blocks=blocks)
        for spec in specs:
            ds = ds.map_batches(spec.cls, **self._map_opts(spec))
        return ds

    def run_dataset(self, specs: list[StageSpec], paths: list[str], out_dir: str, filesystem: Any = None,
                    progress: bool = False, rows: int = 0) -> str:
        """Run the Dataset and write its rows as parquet parts under `out_dir`; returns Ray Data's stats."""
        ds = self.dataset(specs, paths, filesystem, progress, rows=rows)
        try:
            ds.write_parquet(out_dir, filesystem=filesystem, ray_remote_args={"num_cpus": 0.1})
        except Exception as e:  # a pool that timed out starting: say why in our words
            if "actor" in str(e).lower() and "time" in str(e).lower():
                raise RuntimeError(f"{e}; {_pool_list(self.cfg, specs)}") from e
            raise
        self.last_stats = ""
        with contextlib.suppress(Exception):
            self.last_stats = ds.stats()
        self.last_timings = stage_seconds(self.last_stats, fuse_specs(specs))
        return self.last_stats

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
        if self._watchdog is not None:  # it wakes on the closed pipe, finds nothing left, exits
            with contextlib.suppress(OSError):
                self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=5)
            self._watchdog = None


def local_cpus(cfg: Config) -> float:
    """Logical CPUs a private local Ray advertises: this machine's cores, or what every configured pool
    asks for together (all model roles + two retrieval pools + the writer + read/write tasks), whichever is
    more. Ray's CPUs are a reservation count, not a limit: on one machine the pools share the cores anyway
    and each model's `n_threads` decides its real use, so a 2-core box must not refuse a pipeline whose
    pools ask 2.25 (embedder 1 + expander .5 + reranker .5 + ...). A cluster (ray_address) keeps what its
    nodes advertise, and check_fits still fails fast there."""
    roles = ("embedder", "expander", "reranker")
    want = sum(getattr(cfg, r).count * getattr(cfg, r).num_cpus for r in roles)
    want += 2 * cfg.retriever.count * cfg.retriever.num_cpus + cfg.writer.num_cpus + 0.2
    return float(max(os.cpu_count() or 1, -(-want // 1)))


_OP = re.compile(r"^Operator \d+ (.+?): \d+ tasks")
_WALL = re.compile(r"Remote wall time: .*?, ([\d.]+)(us|ms|s) total")


def stage_seconds(stats: str, specs: list[StageSpec] | None = None) -> dict[str, float]:
    """Per operator of a Ray Data run, its tasks' summed remote wall time in seconds, read off
    `Dataset.stats()`. With the (fused) `specs` the MapBatches operators are named by their stages, a
    Chain as `A+B+C`; the read and write operators keep Ray Data's names."""
    names = [("+".join(c.__name__ for c, _ in s.kwargs["stages"]) if s.cls is Chain else s.name)
             for s in specs or []]
    unit = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
    out: dict[str, float] = {}
    name, k = None, 0
    for line in stats.splitlines():
        if m := _OP.match(line.strip()):
            name = m.group(1)
            if name.startswith("MapBatches(") and k < len(names):
                name, k = names[k], k + 1
        elif name and (w := _WALL.search(line)):
            out[name] = out.get(name, 0.0) + float(w.group(1)) * unit[w.group(2)]
            name = None
    return out


def _pool_list(cfg: Config, specs: list[StageSpec]) -> list[str]:
    out = []
    for spec in specs:
        a = getattr(cfg, spec.pool)
        out.append(f"{spec.name}: {1 if spec.single else a.count} x num_cpus={a.num_cpus:g} ({spec.pool})")
    return out


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


def make_runner(cfg: Config, n_rows: int = 0, mode: str | None = None) -> Runner:
    """Pick a runner: `mode` (or cfg.runner.mode); auto = `auto_ray`."""
    mode = mode or cfg.runner.mode
    if mode == "auto":
        mode = "ray" if auto_ray(cfg, n_rows) else "inproc"
    return RayRunner(cfg) if mode == "ray" else Runner(cfg)
