"""Start-of-job check that every node which may run a part of a Ray Data job can reach that part's paths.

A job's actors and read tasks run on whatever node Ray places them: the retriever pool's actors (any node
with the CPUs) and the cache writer open the index there, the last pool's actors write the job's result
parts there, and read tasks (a job too large for the driver to read) read its todo files there. A path
that exists only on the driver's node would fail in an actor mid-job (or leave Ray Data retrying); this
check runs one tiny task pinned to each such node first and fails with the node, the path, what was
needed and the fix (`check_paths`).

No Ray import here: the per-node tasks go through `RayRunner.on_nodes` (fanout/exec/ray_runner.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from fanout.config.services import StorageConfig
from fanout.errors import PlacementError
from fanout.exec.ray_session import RaySession
from fanout.store import manifest, storage

if TYPE_CHECKING:
    from fanout.exec.runner import StageSpec
    from fanout.exec.stage_io import Parts

IO_CPUS = 0.1  # what a Ray Data read task asks for (fanout/exec/ray_data.py): any node with that may run one


@dataclass(frozen=True)
class Need:
    """One path that some nodes must reach. `fs` is the job's own filesystem object (its todo files and parts,
    as Ray Data's tasks and actors get it); without it the path is a LanceDB location resolved on the node
    as a `Collection` does."""

    what: str  # "the index" / "the job's parts folder"
    path: str  # a local path or URI (the index), or a path inside `fs` (the parts)
    write: bool  # must be writable there too
    who: str  # who needs it on that node, for the message
    fix: str
    pools: tuple[tuple[str, bool], ...] = ()  # (config section, is a model pool); () = read tasks
    probe: str = ""  # a file that must be readable (the collection's manifest, a todo file)
    fs: Any = None


def probe(needs: list[Need], storage_cfg: StorageConfig) -> list[str]:
    """On one node: why each need is not met there ("" when it is). Runs inside a pinned Ray task."""
    return [_problem(n, storage_cfg) for n in needs]


def _problem(need: Need, storage_cfg: StorageConfig) -> str:
    try:
        if need.fs is None and "://" in need.path:  # an object-store index: as the node's Collection sees it
            fs, path = storage.filesystem(need.path, storage_cfg)
            probe_path = storage.filesystem(need.probe, storage_cfg)[1] if need.probe else ""
        else:
            fs, path, probe_path = need.fs, need.path, need.probe
        if fs is None or isinstance(fs, pafs.LocalFileSystem):
            return _local_problem(path, probe_path, need.write)
        # an object store has no folders to test and no cheap write test: its objects must be there
        if fs.get_file_info(probe_path or path).type == pafs.FileType.NotFound:
            return f"{probe_path or path} not found"
        return ""
    except Exception as e:  # noqa: BLE001 - credentials, endpoint, permissions: the node's own words
        return f"{type(e).__name__}: {e}"


def _local_problem(path: str, probe_path: str, write: bool) -> str:
    if not os.path.isdir(path):
        return "no such folder" if not os.path.exists(path) else "not a folder"
    if not os.access(path, os.R_OK | os.X_OK):
        return "not readable"
    if probe_path and not os.access(probe_path, os.R_OK):
        return f"{probe_path} " + ("not readable" if os.path.exists(probe_path) else "not found")
    if write and not os.access(path, os.W_OK):
        return "not writable"
    return ""


def needs_of(runner: RaySession, specs: list[StageSpec], paths: list[str] | None, parts: Parts | None,
             filesystem: pafs.FileSystem | None) -> list[Need]:
    """The paths a job's stages and read tasks need, from its stage list (the last stage writes `parts`)."""
    out: list[Need] = []
    uses: dict[tuple[str, str, bool], dict[str, Any]] = {}  # (db, collection, written) -> pools, stage names
    for spec in specs:
        if "db" in spec.kwargs:  # every stage given a db opens its Collection in its actors
            u = uses.setdefault((str(spec.kwargs["db"]), str(spec.kwargs.get("collection", "")),
                                 bool(getattr(spec.cls, "writes_db", False))), {"pools": {}, "stages": []})
            u["pools"][spec.pool] = spec.role is not None
            u["stages"].append(spec.name)
    for (db, name, write), u in uses.items():
        pools = ", ".join(f"the {p} pool" for p in u["pools"])
        model = [p for p, m in u["pools"].items() if m]
        fix = ("put it on a shared file system mounted at the same path on every node (e.g. --db /mnt/fanout/db) "
               "or give an object-store URI (--db s3://bucket/db)")
        if model:
            fix += (f"; or keep the {' and '.join(model)} pool off nodes without it: runner.model_resource "
                    f"places model pools only on nodes that offer that resource")
        who = f"{pools} ({', '.join(u['stages'])}) " + ("write the caches into it" if write else "open it") + " there"
        out.append(Need("the index", db, write, who, fix, tuple(u["pools"].items()),
                        probe=manifest.path(db, name) if name else ""))
    fix = ("put the job's output on a shared file system mounted at the same path on every node, or give "
           "an object-store URI (--out s3://bucket/out.parquet)")
    if paths:
        out.append(Need("the job's todo files", os.path.dirname(paths[0]), False,
                        "Ray Data's read tasks (any node with CPU) read them there", fix, probe=paths[0],
                        fs=filesystem))
    if parts is not None and specs:
        pool = "writer" if specs[-1].role else specs[-1].pool  # fanout/exec/ray_data.py writing
        out.append(Need("the job's parts folder", parts.directory, True,
                        f"the {pool} pool's actors (the job's last operator) write its result parts there", fix,
                        ((pool, False),), fs=parts.filesystem))
    return out


def pool_nodes(runner: RaySession, pool: str, model: bool, nodes: list[dict]) -> list[dict]:
    """The nodes where one actor of the pool fits: its num_cpus, its GPUs when `n_gpu_layers` is set, and
    `runner.model_resource` for a model pool (the rules of fanout.exec.ray_data.placement)."""
    served = runner.cfg.served(pool) is not None  # a served role's pool holds no model: any node
    acfg, res = runner.cfg.pool(pool), runner.cfg.runner.model_resource if model and not served else ""
    gpus = acfg.num_gpus if acfg.n_gpu_layers else 0
    return [n for n in nodes if n["Resources"].get("CPU", 0) >= acfg.num_cpus
            and n["Resources"].get("GPU", 0) >= gpus and (not res or n["Resources"].get(res, 0) > 0)]


def check_paths(runner: RaySession, specs: list[StageSpec], paths: list[str] | None = None,
                parts: Parts | None = None, filesystem: pafs.FileSystem | None = None) -> None:
    """Fail before the Dataset runs when a node that may host a pool or a read task cannot reach a path it
    needs there (a RuntimeError naming the node, the path, what was needed and the fix)."""
    needs = needs_of(runner, specs, paths, parts, filesystem)
    if not needs or runner.private:  # a private local Ray runs on this machine only: it sees what we see
        return
    alive = runner.nodes()
    per_node: dict[str, list[Need]] = {}
    for need in needs:
        if need.pools:
            hosts = {n["NodeID"] for p, model in need.pools for n in pool_nodes(runner, p, model, alive)}
        else:
            hosts = {n["NodeID"] for n in alive if n["Resources"].get("CPU", 0) >= IO_CPUS}
        for node_id in hosts:
            per_node.setdefault(node_id, []).append(need)
    ip = {n["NodeID"]: n["NodeManagerAddress"] for n in alive}
    answers = runner.on_nodes(probe, {node: (ns, runner.cfg.storage) for node, ns in per_node.items()},
                              timeout_s=runner.cfg.runner.placement_timeout_s)
    bad = []
    for node_id, ns in sorted(per_node.items(), key=lambda kv: ip.get(kv[0], "")):
        got = answers.get(node_id)
        where = f"node {ip.get(node_id, '?')} (id {node_id[:8]})"
        if isinstance(got, BaseException) or got is None:
            bad.append(f"{where} did not answer the path check within {runner.cfg.runner.placement_timeout_s:g}s "
                       f"(runner.placement_timeout_s): {got!r}")
            continue
        for need, why in zip(ns, got, strict=True):
            if why:
                need_s = "readable and writable" if need.write else "readable"
                bad.append(f"{need.what} {need.path!r} must be {need_s} on {where}, but there: {why}. "
                           f"Who needs it: {need.who}. Fix: {need.fix}")
    if bad:
        raise PlacementError("the job cannot run on this cluster as it is (nothing was started; "
                           "runner.check_paths: false skips this check): " + " | ".join(bad))
