"""Runners: how stages and actor calls are executed (the stage list and the in-process loop).

A pipeline is a list of `StageSpec`s (a callable class over pa.Table plus its constructor kwargs and the
config section that sizes its pool). A job hands its list and a `Source` to `runner.run(specs, source)`, the
one executor interface (with `parts=`, the output is also written as resumable parquet parts): it returns a
`Run`, an iterator over the output tables whose `stats` (a `RunStats`: per stage the seconds spent inside it
and its counters, datatrove's stat_update merged across workers) are complete once it is exhausted
(fanout/exec/stage_io.py). Where a job runs is the runner it is given (runner.mode: `make_runner`,
fanout/exec/runner_mode.py); the caller never asks which, it only consumes tables (writes parts, counts):

- `Runner.run`: the in-process loop over `Runner.pipeline(specs)` (single queries, MCP, tests, small batches);
  model stages call `runner.map(role, table)` on actors held by the runner (one instance per role).
- `RayRunner.run` (fanout/exec/ray_runner.py, fanout/exec/ray_data.py): ONE Ray Data Dataset: read parquet ->
  `map_batches` per stage (each an actor pool sized by its config section) -> written as parquet `Parts` by
  the last operator's actors, or the blocks streamed back to the caller; each operator's stage counters ride
  along in a column (`STATS_COLUMN`) and are merged in the driver. A model pool with `instances` > 1 runs
  `Instances`: that many models in each actor, its calls side by side.

Only fanout/exec/ray_runner.py imports Ray; fanout/exec/runner_mode.py (`make_runner`) imports it only when Ray is chosen,
and fanout/exec/ray_data.py reaches `ray.data` through the runner.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

import pyarrow as pa

from fanout.config import Config
from fanout.exec.stage_io import Parts, Run, RunStats, Source, Steps, counted_call, pop_stats
from fanout.models.identity import actor_class, role_backend

log = logging.getLogger(__name__)

def _batches(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)] or [table]


def _offset(on_rows: Callable[[int], object], base: int, k: int) -> None:
    """on_rows(base + k): a slice's row count reported after the `base` rows of the slices before it."""
    on_rows(base + k)


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
    """The stages one Ray Data CPU actor pool runs (consecutive CPU stages of one pool are fused into one:
    fewer pools, fewer CPUs held; a lone CPU stage is a Chain of one): `stages` is a list of (class, kwargs); each is
    built once per actor and called in order. Each call times its stages and takes the growth of their
    counters, and hands both on in STATS_COLUMN (row 0), merged with what its input carried: the driver then
    adds up one RunStats per block (`pop_stats`), whichever actors and nodes ran them."""

    def __init__(self, stages: list[tuple[type, dict[str, Any]]], parts: Parts | None = None, counters: bool = True):
        self.stages = [cls(**kw) for cls, kw in stages]
        self.names = [cls.__name__ for cls, _ in stages]
        self.parts = parts  # the job's last operator: it writes its output there (fanout/exec/ray_data.py writing)
        self.counters = counters  # False: the last operator of a caller's Dataset, whose rows carry no counters

    def __call__(self, table: pa.Table) -> pa.Table:
        out = counted_call(table, list(zip(self.names, self.stages)))
        if not self.counters:
            return pop_stats(out)[0]
        return out if self.parts is None else self.parts.write_block(out)


class Instances:
    """Up to `n` instances of one model stage in one Ray actor (a subclass per stage sets `stage` and `n`:
    fanout/exec/ray_data.py `_named`): Ray Data runs up to `n` of the actor's calls at once, in threads, and each
    call takes an instance no other call holds, so the `n` models work side by side in one process (the
    models' own code runs outside the GIL: llama.cpp through ctypes, the fake embedder's sleep). One process
    instead of `n`: its Python, Ray and Ray Data start once (~1.3 CPU-s each on 2 cores), which is most of
    a many-actor job's fixed cost. The first instance is built with the actor (a model that cannot load
    fails the pool's start, as before); the others when a call finds every built one busy, so a job with
    fewer calls than `n` never loads the rest. Builds take turns (one model load at a time); one that fails
    (say the GPU's memory is full) is logged and the actor carries on with the models it has."""

    stage: type
    n: int = 1

    def __init__(self, **kwargs: Any):
        self.kwargs = kwargs
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        self.built = 1
        self.lock = threading.Lock()  # guards `built`
        self.building = threading.Lock()  # one model load at a time
        self.free.put(self.stage(**kwargs))

    def _take(self) -> Any:
        with contextlib.suppress(queue.Empty):
            return self.free.get_nowait()
        with self.lock:
            build = self.built < self.n
            self.built += build
        if not build:
            return self.free.get()
        try:
            with self.building:
                return self.stage(**self.kwargs)
        except Exception as e:  # noqa: BLE001 - whatever stops a load (a full GPU): go on with the built ones
            with self.lock:
                self.built -= 1
                self.n = self.built
            log.warning("%s: model instance %d of %d could not be built (%s); this actor goes on with %d",
                        self.stage.__name__, self.built + 1, type(self).n, e, self.built)
            return self.free.get()

    def __call__(self, table: pa.Table) -> pa.Table:
        inst = self._take()
        try:
            return inst(table)
        finally:
            self.free.put(inst)


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


def _stage_key(spec: StageSpec) -> tuple | None:
    """(class, kwargs) as a dict key, or None when a kwarg is not hashable (that stage is never shared)."""
    key = (spec.cls, tuple(sorted(spec.kwargs.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


class Pipeline:
    """Stage instances built once; `__call__(table)` runs them in order and times each (in-process loop)."""

    def __init__(self, specs: list[StageSpec], runner: Runner, reuse: dict | None = None):
        """`reuse`: instances built before, by (class, kwargs); a stage with the same class and kwargs is taken
        from it instead of built again (a long-lived searcher's pipelines for other options then share their
        open tables and memory caches: building a stage opens the collection, ~10-50 ms)."""
        self.specs = specs
        self.stages = []
        for s in specs:
            kw = dict(s.kwargs)
            if s.role:
                kw["runner"] = runner
            key = _stage_key(s)
            if reuse is not None and key is not None and key in reuse:
                self.stages.append(reuse[key])
                continue
            self.stages.append(s.cls(**kw))
            if reuse is not None and key is not None:
                reuse[key] = self.stages[-1]
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
        # one call at a time per model (llama.cpp contexts are not thread-safe), so threads share a model per
        # call: an index round's embedding batches and a search's query embedding take turns
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()

    def role_lock(self, role: str) -> threading.RLock:
        """The lock each call of `role`'s model holds (and its load)."""
        with self._locks_guard:
            return self._locks.setdefault(role, threading.RLock())

    def actor(self, role: str) -> Any:
        if role not in self._actors:
            with self.role_lock(role):
                if role not in self._actors:
                    t = time.perf_counter()
                    self._actors[role] = actor_class(role, role_backend(self.cfg, role))(self.cfg)
                    self.seconds[f"load_{role}"] = time.perf_counter() - t
        return self._actors[role]

    def use(self, role: str, impl: Any) -> None:
        """Answer `role`'s calls with `impl` (called with each batch, as the role's actor is) instead of loading
        its model: a watcher's round worker has its batches embedded by the serving process's model."""
        self._actors[role] = impl

    def preload(self, role: str) -> None:
        """Load the role's model now, before the first request needs it (a server's warm-up): here, the
        in-process actor; a Ray runner's jobs build their own actors, so it has nothing to load ahead."""
        self.actor(role)

    def map(self, role: str, table: pa.Table) -> pa.Table:
        """Run `table` through the role's actor(s) in batches of `cfg.<role>.batch_size`; order is kept."""
        if table.num_rows == 0:
            return self._empty_result(role, table)
        t = time.perf_counter()
        out = self._map(role, _batches(table, self.cfg.pool(role).batch_size))
        self.calls[role] = self.calls.get(role, 0) + 1
        self.seconds[role] = self.seconds.get(role, 0.0) + time.perf_counter() - t
        return pa.concat_tables(out)

    def _map(self, role: str, batches: list[pa.Table]) -> list[pa.Table]:
        impl = self.actor(role)
        out = []
        for b in batches:
            with self.role_lock(role):
                out.append(impl(b))
        return out

    def _empty_result(self, role: str, table: pa.Table) -> pa.Table:
        impl = self.actor(role)
        with self.role_lock(role):
            return impl(table)

    def info(self, role: str, attr: str) -> Any:
        """An attribute of the role's actor (e.g. the embedder's model sha); loads the actor if needed."""
        return getattr(self.actor(role), attr)

    def pipeline(self, specs: list[StageSpec], reuse: dict | None = None) -> Pipeline:
        """The in-process executor of a stage list (model calls through this runner's actors); `reuse`: see
        Pipeline."""
        return Pipeline(specs, self, reuse)

    def run(self, specs: list[StageSpec], source: Source, *, parts: Parts | None = None,
            pipeline: Callable[[], Pipeline] | None = None, slice_rows: int = 0, block_rows: int = 0,
            on_rows: Callable[[int], object] | None = None, progress: bool = False, preserve_order: bool = False
            ) -> Run:
        """Run `specs` over `source`: one output table per slice of `slice_rows` (runner.slice_rows) input
        rows, in order, each also written to `parts` when given. `pipeline`: builds the in-process stages to
        use instead of `specs`' own (a searcher's, sharing its open tables; called only by a runner that runs
        stages in this process); `on_rows(done)`: called as rows finish, per step of about
        runner.progress_step_s (Steps), so a slow model's progress moves per row. `block_rows`, `progress`,
        `preserve_order`: Ray Data's (unused here)."""
        del block_rows, progress, preserve_order
        pipe = pipeline() if pipeline else self.pipeline(specs)
        rows = slice_rows or self.cfg.runner.slice_rows

        def tables(stats: RunStats) -> Iterator[pa.Table]:
            steps, done = Steps(self.cfg.runner.progress_step_s), 0
            for t in source.read(rows):
                s0, c0 = dict(pipe.seconds), pipe.stats()
                # steps only when someone watches the progress: a slice in one call keeps the batching (and the
                # embed calls' float sums, which depend on which texts share a call) independent of timing
                out = steps.run(pipe, t, functools.partial(_offset, on_rows, done)) if on_rows else pipe(t)
                stats.add(RunStats.since(pipe.seconds, pipe.stats(), s0, c0))
                done += t.num_rows
                if parts is not None and out.num_rows:
                    parts.write(out)
                yield out
        return Run(tables)

    def close(self) -> None:
        self._actors.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
