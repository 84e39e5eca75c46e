"""A 2-node Ray cluster on this machine (loopback): a head and a worker node started with `ray start --block`,
each with its own temp dir, ports and process session, stopped by pid (never `ray stop`). Used by
bench/cluster_2node.py, bench/scale_curve.py and tests/test_cluster.py.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("bench.loopback")


_TAKEN: set[int] = set()


def _free_port() -> int:
    """A free loopback port never handed out before in this process (the kernel can return a port it just
    gave us once we closed the probe socket, and Ray refuses two components on one port)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _TAKEN:
            _TAKEN.add(port)
            return port


def _session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session `sid`: everything a `ray start` launched stays in its session."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(d))
    return pids


def hidden_from_worker(folder: str | Path) -> list[str]:
    """A worker prefix: the node runs in its own mount namespace with an empty tmpfs over `folder`, so a path
    under it exists on the head (and the driver) but not on the worker, as on two machines without a shared
    file system. Needs root (or CAP_SYS_ADMIN) and util-linux `unshare`; `can_hide()` says whether it works."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs fanout-hidden "$0" && exec "$@"', str(folder)]


def can_hide() -> str:
    """"" when `hidden_from_worker` works on this machine, else why not."""
    try:
        res = subprocess.run([*hidden_from_worker(tempfile.gettempdir()), "true"], capture_output=True, text=True,
                             timeout=30, check=False)
    except OSError as e:
        return str(e)
    return "" if res.returncode == 0 else (res.stderr.strip() or f"exit {res.returncode}")


class LoopbackCluster:
    """A head node and one worker node on 127.0.0.1, started with `ray start --block`.

    Each node runs in its own process session with a private temp dir and its own ports, so `stop()` ends
    exactly the processes this object started (never `ray stop`, which would stop every Ray on the host) and
    no `ray_current_cluster` file is left where a later `ray.init()` could find it.
    """

    def __init__(self, head_cpus: float = 1, worker_cpus: float = 2, worker_resources: dict | None = None,
                 object_store_mb: int = 200, start_timeout_s: float = 120, dashboard: bool = False,
                 worker_prefix: list[str] | None = None):
        """`worker_prefix`: a command the worker's `ray start` runs under (it must exec its arguments), e.g.
        `hidden_from_worker(folder)` so that the worker node sees an empty folder where the head sees data."""
        self.head_cpus, self.worker_cpus = head_cpus, worker_cpus
        self.dashboard = dashboard  # the job server (`ray job submit`) lives in the dashboard
        self.worker_resources = {"models": 1} if worker_resources is None else worker_resources
        self.object_store_mb = object_store_mb
        self.start_timeout_s = start_timeout_s
        self.worker_prefix = list(worker_prefix or [])
        self.procs: list[subprocess.Popen] = []
        self.dirs: list[str] = []
        self.logs: list[Path] = []
        self.address = ""
        self.dashboard_url = ""

    def _node(self, name: str, args: list[str], cpus: float, prefix: list[str] = ()) -> None:
        tmp = tempfile.mkdtemp(prefix=f"fanout-{name}-", dir="/tmp")
        self.dirs.append(tmp)
        ports = {p: _free_port() for p in ("node-manager-port", "object-manager-port", "metrics-export-port",
                                           "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                           "runtime-env-agent-port")}
        cmd = [*prefix, str(Path(sys.executable).with_name("ray")), "start", "--block", *args,
               "--node-ip-address=127.0.0.1", f"--temp-dir={tmp}", f"--num-cpus={cpus:g}",
               f"--object-store-memory={self.object_store_mb * 2**20}", "--disable-usage-stats",
               "--min-worker-port=0", "--max-worker-port=0", *(f"--{k}={v}" for k, v in ports.items())]
        env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        out = Path(tmp) / f"ray-start-{name}.log"
        self.logs.append(out)
        with out.open("w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                    start_new_session=True)
        self.procs.append(proc)
        deadline = time.monotonic() + self.start_timeout_s
        while "Ray runtime started" not in out.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = out.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"ray start ({name}) failed or timed out after {self.start_timeout_s:g}s; "
                                   f"its output:\n{tail}")
            time.sleep(0.2)

    def start(self) -> Self:
        port = _free_port()
        try:
            dash = _free_port()
            self._node("head", ["--head", f"--port={port}", f"--include-dashboard={str(self.dashboard).lower()}",
                                f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1",
                                f"--ray-client-server-port={_free_port()}"], self.head_cpus)
            self.dashboard_url = f"http://127.0.0.1:{dash}" if self.dashboard else ""
            self.address = f"127.0.0.1:{port}"
            self._node("worker", [f"--address={self.address}",
                                  f"--resources={json.dumps(self.worker_resources)}"], self.worker_cpus,
                       self.worker_prefix)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM each `ray start --block` (it stops its node's processes), SIGKILL what is left after
        `grace_s` (only processes of our nodes' sessions), then remove the temp dirs."""
        sids = [p.pid for p in self.procs]
        for p in reversed(self.procs):  # worker first, then head
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_session_pids(s) for s in sids):
            time.sleep(0.2)
        left = [pid for s in sids for pid in _session_pids(s)]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if left:
            log.warning("killed %d Ray processes that outlived SIGTERM by %gs", len(left), grace_s)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("ray start (pid %d) did not exit", p.pid)
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)
        self.procs = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
