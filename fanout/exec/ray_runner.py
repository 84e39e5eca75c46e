"""The Ray runner: a job as ONE Ray Data Dataset, model roles as Ray actors.

`RayRunner` attaches to `runner.ray_address` / $RAY_ADDRESS or starts a quiet private local Ray
(fanout/exec/private_ray.py: its temp dir, token, watchdog and stop); its `run` /
`dataset` build ONE Ray Data Dataset per job (fanout/exec/ray_data.py); its `map(role, table)` (a direct
model call outside a job: title embeddings, the gap report) goes to a pool of the role's Ray actors. A runner
module: it may import Ray.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fanout.config import Config
from fanout.errors import PlacementError
from fanout.exec import ray_data
from fanout.exec.private_ray import PrivateRay, kill_side_processes, quiet_sigterm
from fanout.exec.ray_data import placement
from fanout.exec.runner import Pipeline, Runner, StageSpec
from fanout.exec.stage_io import Parts, Run, Source
from fanout.models.identity import actor_class, role_backend

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from ray import ObjectRef
    from ray.actor import ActorHandle
    from ray.data import Dataset

log = logging.getLogger(__name__)


class _Host:
    """Ray actor body: builds the role's class inside the worker and forwards calls."""

    def __init__(self, role: str, cfg: Config):
        self.impl = actor_class(role, role_backend(cfg, role))(cfg)

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

    def __init__(self, cfg: Config, private: bool = True):
        """`private=False` (a Ray Data processor added to the caller's Dataset, fanout.ray): with no Ray session
        yet, start the plain local one Ray Data itself would start, and leave it to the caller; never a private
        one whose end would cut the caller's Dataset short."""
        super().__init__(cfg)
        import ray

        self._ray = ray
        self._local: PrivateRay | None = None
        self._pools: dict[str, list[Any]] = {}
        self._owns = False
        address = cfg.runner.ray_address or os.environ.get("RAY_ADDRESS", "")
        if not ray.is_initialized() and not private and not address:
            ray.init(include_dashboard=False, logging_level="ERROR",  # type: ignore[arg-type]  # a level name works
                     configure_logging=False)
        elif not ray.is_initialized():
            if address:  # a cluster's auth mode is its operator's (docs/cluster.md): token clusters set it
                os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            if address:
                with warnings.catch_warnings():
                    # Ray forks its node processes; once lancedb is loaded, each fork child warns on our stderr
                    # about lancedb's fork support before it execs (harmless: the child runs no lancedb code)
                    warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
                    ray.init(address=address, log_to_driver=False,
                             logging_level="ERROR")  # type: ignore[arg-type]  # a level name, as above
            else:  # fanout/exec/private_ray.py: its temp dir, token and watchdog
                self._local = PrivateRay(ray, _reload_auth_settings)
                atexit.register(self.close)  # a run that dies before close() still removes its temp dir
                self._local.start(cfg, local_cpus(cfg))
            self._owns = True
        self._sigterm = quiet_sigterm()

    def ray_data(self) -> Any:
        """The `ray.data` module (fanout/exec/ray_data.py uses it through here: Ray is imported in this module only)."""
        import ray.data

        return ray.data

    def _actors_for(self, role: str) -> list[ActorHandle]:
        if role in self._pools:
            return self._pools[role]
        ray = self._ray
        acfg = self.cfg.pool(role)
        opts: dict[str, Any] = {"num_cpus": acfg.num_cpus, "max_restarts": self.cfg.runner.max_retries,
                                "max_task_retries": self.cfg.runner.max_retries}
        opts.update(placement(self.cfg, role, model=True))
        cls = ray.remote(_Host)
        handles = [cls.options(**opts).remote(role, self.cfg) for _ in range(acfg.count)]
        t = time.perf_counter()
        try:
            ray.get([h.ready.remote() for h in handles], timeout=self.cfg.runner.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            for h in handles:
                ray.kill(h)
            raise self.placement_error(role) from None
        self.seconds[f"load_{role}"] = time.perf_counter() - t
        self._pools[role] = handles
        return handles

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's alive nodes as `ray.nodes()` describes them (resources, address, id)."""
        return [n for n in self._ray.nodes() if n.get("Alive")]

    def placement_error(self, role: str, model: bool = True) -> PlacementError:
        """What was asked, what the cluster has, and the likely fix (Ray itself would just wait forever)."""
        ray, rcfg, acfg = self._ray, self.cfg.runner, self.cfg.pool(role)
        res = rcfg.model_resource if model and self.cfg.served(role) is None else ""
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
        return PlacementError(
            f"{role} actors could not be placed and started within {rcfg.placement_timeout_s:g}s "
            f"(runner.placement_timeout_s): asked {need}; "
            f"free now {_show(ray.available_resources())}; nodes: {listing}. {fix}.")

    def _submit(self, role: str, batches: list[pa.Table]) -> list[ObjectRef]:
        """Send the batches round-robin to the role's actors; the result refs, in batch order."""
        handles = self._actors_for(role)
        return [handles[i % len(handles)].call.remote(b) for i, b in enumerate(batches)]

    def _map(self, role: str, batches: list[pa.Table]) -> list[pa.Table]:
        return self._ray.get(self._submit(role, batches))

    def _empty_result(self, role: str, table: pa.Table) -> pa.Table:
        return self._ray.get(self._actors_for(role)[0].call.remote(table))

    def info(self, role: str, attr: str) -> Any:
        return self._ray.get(self._actors_for(role)[0].get.remote(attr))

    def preload(self, role: str) -> None:
        """Nothing to load ahead: each job's Ray Data pools build their own models."""

    def actor_handles(self, role: str) -> list[ActorHandle]:
        """The role's Ray actor handles (tests kill one to check that a batch survives)."""
        return self._actors_for(role)

    def actor_info(self, role: str) -> list[dict[str, Any]]:
        """Per actor of the role: its worker pid, node id and assigned resources (where placement put it)."""
        return self._ray.get([h.where.remote() for h in self._actors_for(role)])

    @property
    def private(self) -> bool:
        """True on the quiet private local Ray this runner started (one node: this machine)."""
        return self._local is not None

    @property
    def _tmp(self) -> str | None:
        """The private local Ray's temp dir (None when attached to a cluster or closed)."""
        return self._local.tmp if self._local is not None else None

    def on_nodes(self, fn: Callable[..., object], args: dict[str, tuple], timeout_s: float) -> dict[str, Any]:
        """`fn(*args[node_id])` as one tiny task pinned to each node (num_cpus=0: it never waits behind the
        actors); per node its result, or the exception (a timeout included) it ended with."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._ray
        task = ray.remote(num_cpus=0, max_retries=0)(fn)
        refs = {node: task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                .remote(*a) for node, a in args.items()}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        done = set(ready)
        out: dict[str, Any] = {}
        for node, ref in refs.items():
            if ref not in done:
                ray.cancel(ref, force=True)
                out[node] = TimeoutError(f"no answer within {timeout_s:g}s")
                continue
            try:
                out[node] = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - the node's task failed: reported with the node
                out[node] = e
        return out

    # -- Ray Data: one Dataset per job (fanout/exec/ray_data.py) --------------------------------------------
    def check_fits(self, specs: list[StageSpec]) -> None:
        """Fail fast when a stage's actor pool cannot be placed (Ray Data would wait for it forever)."""
        ray_data.check_fits(self, specs)

    def dataset(self, specs: list[StageSpec], paths: list[str] | None = None,
                filesystem: pafs.FileSystem | None = None,
                progress: bool = False, tables: list[pa.Table] | None = None, preserve_order: bool = False,
                rows: int = 0, block_rows: int = 0, source: Dataset | None = None) -> Dataset:
        """ONE lazy Dataset: read (or the caller's `source` Dataset) -> map_batches per stage (see
        ray_data.dataset)."""
        return ray_data.dataset(self, specs, paths, filesystem, progress, tables, preserve_order, rows,
                                block_rows=block_rows, source=source)

    def run(self, specs: list[StageSpec], source: Source, *, parts: Parts | None = None,
            pipeline: Callable[[], Pipeline] | None = None, slice_rows: int = 0, block_rows: int = 0,
            on_rows: Callable[[int], object] | None = None, progress: bool = False, preserve_order: bool = False
            ) -> Run:
        """ONE Ray Data Dataset (ray_data.run; blocks of `block_rows`, runner.block_rows when 0); each stage is
        built in its actors, so `pipeline` and `slice_rows` (the in-process loop's) are not used."""
        del pipeline, slice_rows
        return ray_data.run(self, specs, source, parts, block_rows, progress, preserve_order, on_rows)

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
            if self.private:  # our private local Ray: its side processes hold nothing a later run reads
                kill_side_processes(self._ray)
            self._ray.shutdown()
        if self._local is not None:  # its token settings, temp dir and watchdog end with it
            local, self._local = self._local, None
            atexit.unregister(self.close)
            local.close()
        if getattr(self, "_sigterm", False):
            self._sigterm = False
            with contextlib.suppress(ValueError):  # not the main thread: nothing was installed there
                signal.signal(signal.SIGTERM, signal.SIG_DFL)


def local_cpus(cfg: Config) -> float:
    """Logical CPUs a private local Ray advertises: this machine's cores, or what every configured pool
    asks for together (all model roles + four retrieval pools, one before and after each model stage of a
    search with expansion and rerank on, + the writer + a read task), whichever is more. Ray's CPUs are
    a reservation count, not a limit: on one machine the pools share the cores anyway and each model's
    `n_threads` decides its real use, so a 2-core box must not refuse a pipeline whose pools ask 3.2
    (embedder 1 + expander .5 + reranker .5 + ...). A cluster (ray_address) keeps what its nodes advertise,
    and check_fits still fails fast there."""
    roles = ("embedder", "expander", "reranker")
    want = sum(cfg.pool(r).count * cfg.pool(r).num_cpus for r in roles)
    want += 4 * cfg.retriever.count * cfg.retriever.num_cpus + cfg.writer.num_cpus + 0.2
    return float(max(os.cpu_count() or 1, -(-want // 1)))


def _reload_auth_settings() -> None:
    """Ray reads RAY_AUTH_MODE / the token once per process (its C++ config and token cache): after the private
    Ray's token settings change (fanout/exec/private_ray.py), have it read them again (what Ray's own tests do
    between auth modes)."""
    try:
        from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]  # private, untyped
        from ray._raylet import Config as RayConfig  # type: ignore[attr-defined]  # private, untyped

        RayConfig.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError) as e:  # another Ray version: its env is read at start anyway
        log.debug("Ray auth settings not reloaded: %s", e)
