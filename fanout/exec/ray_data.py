"""Jobs on Ray Data: a job's stage list as ONE streaming Dataset (read parquet -> `map_batches` per stage,
each an actor pool sized by its config section -> parquet parts written by the last operator's actors, or the
blocks streamed back to the caller: `run`), its fit check, and the stage counters each block carries
(fanout/exec/runner.py Chain, RunStats).

Functions over the runner's `RaySession` (fanout/exec/ray_session.py; fanout/exec/ray_runner.py holds the Ray session and is the one module that imports
Ray; these reach `ray.data` through `runner.ray_data()`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Self

import pyarrow as pa

from fanout.config import Config
from fanout.errors import PlacementError
from fanout.exec.node_paths import IO_CPUS, check_paths, pool_nodes
from fanout.exec.ray_session import RaySession
from fanout.exec.runner import Chain, Instances, StageSpec, fuse_specs
from fanout.exec.stage_io import Parts, Run, RunStats, Source, pop_stats

if TYPE_CHECKING:
    import pyarrow.fs as pafs

def check_fits(runner: RaySession, specs: list[StageSpec], sizes: list[int] | None = None,
               reserve: float = IO_CPUS, fit: bool = True) -> None:
    """Fail fast when a stage's actor pool cannot be placed (Ray Data would wait for it forever).

    Each pool must fit on the nodes that offer what one of its actors asks for, and all pools together
    must fit in the cluster's CPUs; otherwise the same message as for the model actors is raised. `reserve`:
    the CPUs left for tasks beside the pools (fanout's read task; a caller's own Dataset needs a whole one
    for each of its read, filter or map tasks, which Ray Data runs with num_cpus=1 by default). With `fit`
    and `runner.fit_pools`, pools that ask for too many CPUs are first scaled down to fit (`fit_pools`).
    """
    nodes = runner.nodes()
    total_cpu = sum(n["Resources"].get("CPU", 0) for n in nodes)
    pools = []  # (spec, its actors, the places the nodes that suit it have for them)
    for i, spec in enumerate(specs):
        acfg = runner.cfg.pool(spec.pool)
        suit = pool_nodes(runner, spec.pool, spec.role is not None, nodes)
        pools.append((spec, sizes[i] if sizes else 1 if spec.single else acfg.count,
                      sum(int(n["Resources"]["CPU"] // acfg.num_cpus) for n in suit)))
    want = reserve + sum(count * runner.cfg.pool(spec.pool).num_cpus for spec, count, _ in pools)
    free = total_cpu - reserve
    if fit and runner.cfg.runner.fit_pools and free >= MIN_POOL_CPUS * len(specs) \
            and (want > total_cpu + 1e-9 or any(count > room for _, count, room in pools)):
        fit_pools(runner, specs, min(1.0, free / max(want - reserve, 1e-9)))
        return check_fits(runner, specs, sizes, reserve, fit=False)
    for spec, count, room in pools:
        if count > room:
            raise runner.placement_error(spec.pool, model=spec.role is not None)
    if want > total_cpu + 1e-9:
        theirs = (f", plus {reserve:g} for your Dataset's own tasks (a read or .filter() task asks for one CPU)"
                  if reserve >= 1 else "")
        raise PlacementError(
            f"the pipeline's actor pools ask for {want - reserve:g} CPUs together "
            f"({', '.join(_pool_list(runner.cfg, specs))}){theirs} but the cluster has {total_cpu:g}: Ray Data "
            f"would wait forever. Lower the pools' count or num_cpus (fractional is fine: sleep-bound or GPU "
            f"actors need little CPU), give a local Ray more CPUs (ray.init(num_cpus=...)), or add nodes.")


MIN_POOL_CPUS = 0.01  # the least num_cpus `fit_pools` gives an actor


def fit_pools(runner: RaySession, specs: list[StageSpec], scale: float) -> None:
    """Every pool's num_cpus times `scale` (<= 1, rounded down to 0.01, at most one node's CPUs), so that the
    pools and the tasks beside them fit the cluster (`runner.fit_pools`); `runner.cfg` is replaced for this
    runner's jobs and the choice logged."""
    pools = sorted({s.pool for s in specs})
    node_cpus = max((n["Resources"].get("CPU", 0) for n in runner.nodes()), default=0)

    def fitted(x: float) -> float:
        return max(MIN_POOL_CPUS, min(math.floor(x * scale * 100) / 100, node_cpus))

    cfg = runner.cfg
    # a served role's pool takes remote.num_cpus (Config.pool): that one is scaled, once for all of them
    change = {("remote" if cfg.pool(p) is not getattr(cfg, p) else p): {"num_cpus": fitted(cfg.pool(p).num_cpus)}
              for p in pools}
    if all(getattr(cfg, k).num_cpus == v["num_cpus"] for k, v in change.items()):
        return  # nothing to scale (a pool that no node suits for another reason: the check says which)
    before = _pool_list(runner.cfg, specs)
    runner.cfg = runner.cfg.replace(**change)
    logging.getLogger(__name__).warning(
        "the pipeline's actor pools (%s) did not fit this cluster beside the job's own tasks: each pool's "
        "num_cpus scaled by %.2f (%s); set runner.fit_pools: false to refuse instead, or give Ray more CPUs",
        ", ".join(before), scale, ", ".join(_pool_list(runner.cfg, specs)))


def map_opts(runner: RaySession, spec: StageSpec, size: int = 0) -> dict[str, Any]:
    rd = runner.ray_data()
    acfg = runner.cfg.pool(spec.pool)
    pool: dict[str, Any] = {"size": size or (1 if spec.single else acfg.count)}
    if (n := instances(runner.cfg, spec)) > 1:  # the actor's calls run side by side, each on its own model
        pool.update(enable_true_multi_threading=True, max_concurrent_calls_per_actor=n)
    opts: dict[str, Any] = {
        "batch_format": "pyarrow", "batch_size": spec.batch_rows or acfg.batch_size,
        "fn_constructor_kwargs": spec.kwargs, "num_cpus": acfg.num_cpus, "compute": rd.ActorPoolStrategy(**pool),
    }
    opts.update(placement(runner.cfg, spec.pool, model=spec.role is not None))
    return opts


def dataset(runner: RaySession, specs: list[StageSpec], paths: list[str] | None = None,
            filesystem: pafs.FileSystem | None = None,
            progress: bool = False, tables: list[pa.Table] | None = None, preserve_order: bool = False,
            rows: int = 0, block_rows: int = 0, parts: Parts | None = None, source: Any = None
            ) -> Any:  # ray.data.Dataset: named in fanout/exec/ray_runner.py only (Ray stays in the runner)
    """ONE Dataset: read parquet `paths` (or `tables` held by the driver, one block each) -> map_batches per
    stage (actor pools). Lazy: nothing runs until it is iterated. With `parts`, the last operator writes
    its answered rows there as parts and hands on only their counters (`Parts.write_block`).
    Before it is built, every node that may host a pool or a read task is checked for the paths it needs
    there (`runner.check_paths`).

    `rows` (the input's row count, when known) splits the read into blocks (`read_blocks`): a todo file holds
    up to 1,024 rows and one block reaches one actor, so without the split a 1,000-row job would keep one
    retrieval actor and one embedder busy however many there are. `block_rows` overrides
    `runner.block_rows` (a model-bound job wants small blocks: its progress moves per block).

    `source`: a Dataset of the caller's (fanout.ray.search) to add the stages to, lazily, instead of a read;
    its blocks are the caller's and the pools take their configured sizes (its row count is not known)."""
    rd = runner.ray_data()
    ctx = rd.DataContext.get_current()
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
    if hasattr(ctx, "wait_for_min_actors_s"):
        # a private local Ray is ours alone, so the fit check below is exact: every pool starts at once (Ray Data
        # then provisions them together; waiting for each operator's pool in turn cost ~3.7 s of a job's start
        # on 2 cores, bench/query_cost.py). On a shared cluster other jobs may hold the CPUs: each pool must
        # start within runner.placement_timeout_s or the job fails, never waits forever.
        ctx.wait_for_min_actors_s = -1 if runner.private else int(runner.cfg.runner.placement_timeout_s)
    ctx.verbose_stats_logs = False
    for name in ("ray.data", "ray.data._internal"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # a small job (fewer blocks than a pool has actors) is not worth a warning per pool
    warnings.filterwarnings("ignore", message="The minimum number of concurrent actors", category=UserWarning)
    if runner.cfg.runner.check_paths:
        check_paths(runner, specs, paths if tables is None else None, parts, filesystem)
    specs = [chained(s) for s in fuse_specs(specs)]  # every CPU operator a Chain: each reports its counters
    if source is not None and specs and specs[-1].cls is Chain:  # the caller's rows: no counters column
        specs[-1] = dataclasses.replace(specs[-1], kwargs={**specs[-1].kwargs, "counters": False})
    if parts is not None:
        specs = writing(specs, parts)
    blocks = None
    if tables is not None:
        read_rows = max((t.num_rows for t in tables), default=0)  # rows per block
        rows = rows or sum(t.num_rows for t in tables)
    else:
        if rows:
            assert paths is not None  # rows counted: read from parquet `paths` (the caller's Dataset counts none)
            blocks = read_blocks(runner.cfg, specs, rows, len(paths), block_rows)
        read_rows = -(-rows // blocks) if rows and blocks else 0
    cuts = [model_block_rows(runner.cfg, spec, rows, read_rows) for spec in specs]
    sizes = pool_sizes(runner.cfg, specs, cuts, rows, read_rows)
    check_fits(runner, specs, sizes, reserve=1.0 if source is not None else IO_CPUS)
    if source is not None:
        ds = source
    elif tables is not None:
        # from_blocks: one block per table, metadata computed here; from_arrow runs a remote task per table for
        # it before the job starts (a worker process's start and imports on the driver's critical path)
        ds = rd.from_blocks(tables) if hasattr(rd, "from_blocks") else rd.from_arrow(tables)
    else:  # read tasks must not wait behind the actor pools (ray#44687): they ask for IO_CPUS
        ds = rd.read_parquet(paths, filesystem=filesystem, num_cpus=IO_CPUS, override_num_blocks=blocks)
    for spec, cut, size in zip(specs, cuts, sizes, strict=True):
        if cut:  # a model pool: blocks spread evenly over its actors
            ds = ds.repartition(target_num_rows_per_block=cut)
        ds = ds.map_batches(_named(spec, instances(runner.cfg, spec)), **map_opts(runner, spec, size))
    return ds


def pool_sizes(cfg: Config, specs: list[StageSpec], cuts: list[int], rows: int, block_rows: int) -> list[int]:
    """Actors per pool: its configured count, but no more than the calls the job has for it (its input's
    blocks, bundled up to its batch size), so a 5-query job on a 16-embedder config starts one embedder,
    not 16 processes that each load the model and never get a row. Unknown rows, or
    `runner.size_pools_to_job` off: the count."""
    out = []
    for spec, cut in zip(specs, cuts, strict=True):
        count = 1 if spec.single else cfg.pool(spec.pool).count
        if rows and block_rows and cfg.runner.size_pools_to_job:
            block_rows = cut or block_rows
            batch = spec.batch_rows or cfg.pool(spec.pool).batch_size
            calls = -(-rows // max(block_rows, batch))
            count = max(1, min(count, -(-calls // instances(cfg, spec))))
        out.append(count)
    return out


def model_block_rows(cfg: Config, spec: StageSpec, rows: int, read_rows: int) -> int:
    """Rows per block to cut the input of model stage `spec` into (`runner.model_blocks_per_actor` blocks per
    actor of its pool), 0 when the read blocks are already that small, the pool has one actor, the stage is
    not a model stage, or the row count is unknown."""
    per_actor = cfg.runner.model_blocks_per_actor
    if not spec.role or not per_actor or not rows or not read_rows:
        return 0
    workers = (1 if spec.single else cfg.pool(spec.pool).count) * instances(cfg, spec)
    if workers == 1:  # one model takes every block whatever their sizes; the repartition's map tasks only cost
        return 0
    cut = max(1, -(-rows // (workers * per_actor)))
    return cut if cut < read_rows else 0


def read_blocks(cfg: Config, specs: list[StageSpec], rows: int, files: int, block_rows: int = 0) -> int:
    """Blocks to read `rows` queries as: one per `runner.block_rows` (each block pays Ray Data's per-block
    costs in every operator), but at least two per actor of the widest pool, at most one per row."""
    widest = max((1 if s.single else cfg.pool(s.pool).count for s in specs), default=1)
    want = max(-(-rows // (block_rows or cfg.runner.block_rows)), 2 * widest)
    return max(files, min(want, rows))


def writing(specs: list[StageSpec], parts: Parts) -> list[StageSpec]:
    """The stage list with its last CPU operator (a Chain: a batch job's ends with the cache writer) also
    writing its output to `parts`, in its actors; a list that ends in a model stage gets a one-actor writer.

    Written where the rows are made, not by Ray Data's `write_parquet`: its write tasks each need a worker
    process (on 2 cores ~1 CPU-s and ~1 s of a job's wall to start one) and every answered block one more
    hop through the object store, to do what `Parts.write` does in the actor that holds the block."""
    last = specs[-1] if specs else None
    if last is not None and last.cls is Chain:
        return [*specs[:-1], StageSpec(Chain, {**last.kwargs, "parts": parts}, pool=last.pool,
                                       batch_rows=last.batch_rows, single=last.single)]
    return [*specs, StageSpec(Chain, {"stages": [], "parts": parts}, pool="writer", single=True)]


def chained(spec: StageSpec) -> StageSpec:
    """A CPU stage as a Chain of one (a fused Chain as it is), with its pool and batch size: every CPU operator
    reports its stages' seconds and counters. A model stage runs as it is: wrapping it too (a Chain of one, or
    a counting subclass) cost 15-20% of the 16-actor throughput in bench/scale_curve.py (50-54 queries/s
    against 59-60, cause not found), so on Ray Data the model stages' own counters are not reported; what
    they did shows in the rows (`expansion`, the vectors) and in the in-process loop's counters."""
    if spec.cls is Chain or spec.role:
        return spec
    return StageSpec(Chain, {"stages": [(spec.cls, spec.kwargs)]}, pool=spec.pool, role=spec.role,
                     batch_rows=spec.batch_rows, single=spec.single)


def display_name(spec: StageSpec) -> str:
    """A stage's name, a Chain's as `A+B+C` (`WriteParts`: the writer `writing` appends after a model stage)."""
    if spec.cls is not Chain:
        return spec.name
    return "+".join(c.__name__ for c, _ in spec.kwargs["stages"]) or "WriteParts"


def instances(cfg: Config, spec: StageSpec) -> int:
    """Model instances per actor of `spec`'s pool (`instances` of its section; 1 for a CPU stage)."""
    return cfg.pool(spec.pool).instances if spec.role and not spec.single else 1


def _named(spec: StageSpec, n: int = 1) -> type:
    """The class Ray Data runs for a stage. A Chain gets a subclass named after its stages (`A+B+C`): Ray
    names an operator after its class, and two operators of one name share one stats entry (the second
    prints `[execution cached]`, so its time was lost and the next stage's read as its own). A model stage
    with `n` > 1 instances per actor: an `Instances` subclass of the stage's name holding up to `n` of it."""
    if spec.cls is not Chain and n > 1:
        name = spec.cls.__name__
        return type(name, (Instances,), {"stage": spec.cls, "n": n, "__module__": Instances.__module__,
                                         "__qualname__": name})
    if spec.cls is not Chain:
        return spec.cls
    name = display_name(spec)
    return type(name, (Chain,), {"__module__": Chain.__module__, "__qualname__": name})


class PartsWatcher:
    """Progress of a Ray Data job that writes parts: a driver thread lists the parts the last pool's actors
    have finished every `seconds` and reports the rows in them (their parquet footers: one row per query), so
    `on_rows(done)` moves per written block while the job runs. Parts present at the start (a resumed job's)
    are not counted; a part still being written is read on a later pass."""

    def __init__(self, parts: Parts, on_rows: Callable[[int], object], seconds: float):
        self.parts, self.on_rows, self.seconds = parts, on_rows, seconds
        self.seen: dict[str, int] = dict.fromkeys(parts.files(), 0)  # resumed parts: counted elsewhere
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="parts-watcher", daemon=True)

    def poll(self) -> None:
        import pyarrow.parquet as pq

        for f in self.parts.files():
            if f in self.seen:
                continue
            try:
                with self.parts.filesystem.open_input_file(f) as fh:
                    self.seen[f] = pq.read_metadata(fh).num_rows
            except (OSError, pa.ArrowInvalid):  # not finished yet
                continue
        self.on_rows(sum(self.seen.values()))

    def _loop(self) -> None:
        while not self._stop.wait(self.seconds):
            with contextlib.suppress(Exception):  # progress never fails the job
                self.poll()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if exc[0] is None:
            self.poll()


def run(runner: RaySession, specs: list[StageSpec], source: Source, parts: Parts | None = None, block_rows: int = 0,
        progress: bool = False, preserve_order: bool = False, on_rows: Callable[[int], object] | None = None) -> Run:
    """ONE Dataset over `source`. With `parts`, the last operator's actors write its blocks as parquet parts
    (`writing`: the answered rows never pass through the driver: streaming them back cost 25% of the 16-actor
    throughput in bench/scale_curve.py) and the Run yields nothing; `on_rows(done)` per written part. Without,
    the blocks stream back as they finish (in input order with `preserve_order`); `on_rows(done)` per block.
    Either way each block's counters are taken off it. A source of at most `runner.driver_read_rows` rows is
    read here, in the driver (`driver_tables`)."""
    tables = source.tables if source.tables is not None else driver_tables(runner.cfg, specs, source, block_rows)
    ds = dataset(runner, specs, source.files if tables is None else None, source.filesystem, progress,
                 tables, preserve_order, rows=source.rows, block_rows=block_rows, parts=parts)

    def blocks(stats: RunStats) -> Iterator[pa.Table]:
        done = 0
        try:
            if parts is not None:
                # run to the end with no consumer in the loop (materialize: only the counters stay, a row per
                # block): taking each block in the driver as it came cost 8-12% of the 16-actor throughput in
                # bench/scale_curve.py (10,000 queries: 141.7 / 146.0 s against 130.2 s). Progress: the parts.
                watch = PartsWatcher(parts, on_rows, runner.cfg.runner.progress_step_s) if on_rows \
                    else contextlib.nullcontext()
                with watch:
                    done_ds = ds.materialize()
                for t in done_ds.iter_batches(batch_format="pyarrow", batch_size=None):
                    stats.add(pop_stats(t)[1])
                return
            for t in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                t, st = pop_stats(t)
                stats.add(st)
                yield t
                done += t.num_rows
                if on_rows:
                    on_rows(done)
        except Exception as e:  # a pool that timed out starting: say why in our words
            if "actor" in str(e).lower() and "time" in str(e).lower():
                raise PlacementError(f"{e}; {_pool_list(runner.cfg, fuse_specs(specs))}") from e
            raise
    return Run(blocks)


def driver_tables(cfg: Config, specs: list[StageSpec], source: Source, block_rows: int = 0) -> list[pa.Table] | None:
    """A small job's input read here, in the driver, as its blocks (None: Ray Data's read tasks read it).
    A read task needs a worker process (on 2 cores ~1 CPU-s and ~1 s of a job's start) and another for the
    files' metadata, to read what the driver reads in milliseconds; up to `runner.driver_read_rows` rows
    the driver holds them all at once (from_arrow puts them in the object store), beyond that they stream."""
    if not source.files or not 0 < source.rows <= cfg.runner.driver_read_rows:
        return None
    blocks = read_blocks(cfg, fuse_specs(specs), source.rows, 1, block_rows)
    return list(source.read(-(-source.rows // blocks)))


def _pool_list(cfg: Config, specs: list[StageSpec]) -> list[str]:
    out = []
    for spec in specs:
        a = cfg.pool(spec.pool)
        out.append(f"{display_name(spec)}: {1 if spec.single else a.count} x num_cpus={a.num_cpus:g} ({spec.pool})")
    return out


def placement(cfg: Config, section: str, model: bool) -> dict[str, Any]:
    """Ray options that place one actor of a pool: GPUs when `n_gpu_layers` is set, the model resource."""
    acfg = cfg.pool(section)
    opts: dict[str, Any] = {}
    if acfg.n_gpu_layers:
        opts["num_gpus"] = acfg.num_gpus
    if model and cfg.runner.model_resource and cfg.served(section) is None:  # a served role holds no model file
        opts["resources"] = {cfg.runner.model_resource: 1e-3}
    return opts


