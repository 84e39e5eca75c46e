"""The private local Ray a `RayRunner` starts when no cluster is named, and the driver's side of Ray's processes.

`PrivateRay` starts it quietly in a 0700 temp dir of its own, with a token only this driver holds (no other
local process or user can submit work through its loopback ports) and a watchdog process that kills what is
left of it and removes the dir if the driver dies (even kill -9); `close` undoes the token settings, removes
the dir and lets the watchdog go. Also here: the quick stop of its side processes, and the SIGTERM handler a driver
that owns a Ray installs. A runner module's helper: it is handed the
`ray` module (fanout/exec/ray_runner.py is the one module that imports Ray, tests/test_layers.py checks it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from types import FrameType, ModuleType

from fanout.config import Config
from fanout.exec.imports import warm_in_thread

log = logging.getLogger(__name__)


class PrivateRay:
    """A quiet private local Ray for one driver: `tmp` (its temp dir) is made at construction, `start` sets the
    token, starts the watchdog and `ray.init`, `close` (after `ray.shutdown`) cleans up."""

    def __init__(self, ray: ModuleType, reload_auth: Callable[[], None]):
        """`reload_auth`: has Ray read RAY_AUTH_MODE and the token again (the runner's, where Ray may be imported)."""
        self.ray = ray
        self._reload_auth = reload_auth
        self.tmp = tempfile.mkdtemp(prefix="fanout-ray-", dir="/tmp")
        self._watchdog: subprocess.Popen | None = None
        self._env_before: dict[str, str | None] = {}

    def start(self, cfg: Config, num_cpus: float) -> None:
        self._private_token()
        self._watchdog = start_watchdog(self.tmp)
        warm_in_thread(WARM_IMPORTS, first=SHARED_IMPORTS)
        with warnings.catch_warnings():
            # Ray forks its node processes; once lancedb is loaded, each fork child warns on our stderr
            # about lancedb's fork support before it execs (harmless: the child runs no lancedb code)
            warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
            for attempt in (1, 2):  # Ray gives its raylet 30 s; an overloaded box can miss that once
                try:
                    self.ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                                  logging_level="ERROR", configure_logging=False, _temp_dir=self.tmp,
                                  object_store_memory=cfg.runner.object_store_mb * 2**20)
                    break
                except Exception as e:
                    if attempt == 2 or "timed out during startup" not in str(e):
                        raise
                    log.warning("local Ray did not start in time (%s); trying once more", e)
                    with contextlib.suppress(Exception):
                        self.ray.shutdown()

    def _private_token(self) -> None:
        """The private local Ray takes connections only with a token of its own: a random one in a 0600 file in
        its 0700 temp dir (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH), so another local process or user cannot
        submit work to it through its loopback ports. The variables are restored by close()."""
        import secrets

        path = os.path.join(self.tmp, "auth_token")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
        for k, v in (("RAY_AUTH_MODE", "token"), ("RAY_AUTH_TOKEN_PATH", path)):
            self._env_before[k] = os.environ.get(k)
            os.environ[k] = v
        if "RAY_AUTH_TOKEN" in os.environ:  # an inherited token would win over the file
            self._env_before["RAY_AUTH_TOKEN"] = os.environ.pop("RAY_AUTH_TOKEN")
        self._reload_auth()

    def close(self) -> None:
        """After `ray.shutdown()`: the token settings end with it, the temp dir goes, the watchdog is let go."""
        for k, v in self._env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if self._env_before:
            self._env_before = {}
            self._reload_auth()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self._watchdog is not None:  # it wakes on the closed pipe, finds nothing left, exits
            with contextlib.suppress(OSError):
                if self._watchdog.stdin is not None:  # started with stdin=PIPE
                    self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=5)
            self._watchdog = None


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


def start_watchdog(tmp: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WATCHDOG, tmp], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


# What a Ray Data job's driver imports after `ray.init` (the Dataset API; Lance to open the index): imported
# in a thread while `ray.init` waits ~3 s for the private local Ray's processes, the driver mostly idle
# (bench/query_cost.py: the job's fixed wall). Modules that `ray.init` imports too are imported first, here,
# so the two threads never import one module at once (two threads inside one circular import can deadlock)
WARM_IMPORTS = ("ray.data", "lance")
SHARED_IMPORTS = ("pydantic", "ray.dashboard", "ray._common.usage.usage_lib")  # Ray 2.60's ray.init imports these


def quiet_sigterm() -> bool:
    """SIGTERM ends the driver like an exception (exit 143) instead of Ray's C++ failure handler.

    `ray.init` installs abseil's failure signal handler in the driver, SIGTERM included: a `kill` (a
    scheduler's stop, `timeout`) printed "*** SIGTERM received ... PC: @ ... clock_nanosleep" frames twice on
    stderr and aborted (exit 134, SIGABRT) instead of exiting. A Python handler installed after `ray.init`
    replaces it: SystemExit unwinds the batch like Ctrl-C does (the runner closes Ray; finished parts stay,
    the same command resumes) and the process exits 143 (128 + SIGTERM). Crash signals (SIGSEGV, SIGABRT)
    keep Ray's handler and its stack dump. Only the main thread may install handlers; close() restores the
    default."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return False

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        del frame
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    return True


SIDE_PROCESSES = ("monitor", "dashboard", "log_monitor")  # a private local Ray's; not the raylet or GCS


def kill_side_processes(ray: ModuleType) -> None:
    """SIGKILL the private local Ray's monitor, dashboard and log monitor before `ray.shutdown()`.

    `ray.shutdown()` stops its processes one after another, each with SIGTERM and up to a second's wait
    (~1.35 s for five here); these three need no graceful exit (their temp dir is removed right after), and
    one already gone is skipped by Ray. The raylet and GCS still get Ray's graceful stop (the driver must
    disconnect from them first: killing the GCS early hung the driver's exit for 8 s). Measured: shutdown
    1.35 s -> 0.15-0.4 s. Ray's node object is private API; if it ever changes shape, Ray stops them all as
    before.
    """
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    procs = getattr(node, "all_processes", None)
    if not isinstance(procs, dict):
        return
    side = [getattr(info, "process", None) for kind in SIDE_PROCESSES for info in procs.get(kind) or []]
    alive = [p for p in side if p is not None and p.poll() is None]
    for proc in alive:  # all killed first, then reaped
        with contextlib.suppress(Exception):
            proc.kill()
    for proc in alive:
        with contextlib.suppress(Exception):
            proc.wait(timeout=1)
