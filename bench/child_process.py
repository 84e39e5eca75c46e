"""What the benchmarks that measure each code version in a process of its own, run as `-m bench.NAME`, share
(bench/index_first.py, index_incremental.py): the child's hidden flags, its peak memory, and its run, whose last line of output
is its JSON result; and a process's or thread's CPU seconds from /proc (`proc_cpu_s`). (bench/round_jobs.py runs its own file by path under another checkout's interpreter, where
`bench` is not importable: it keeps its own.)"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path


def add_child_flags(ap: argparse.ArgumentParser) -> None:
    """`--child` (this process measures), `--vault` and `--db` (what it measures), hidden from --help."""
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--vault", help=argparse.SUPPRESS)
    ap.add_argument("--db", help=argparse.SUPPRESS)


def run_child(cmd: list[str], name: str, cwd: str | Path, env: dict[str, str] | None = None) -> dict:
    """Run the measuring process `cmd` in `cwd`: its JSON result (its output's last line); its stderr's end and
    SystemExit naming `name` when it fails."""
    res = subprocess.run(cmd, check=False, env=env, cwd=str(cwd), capture_output=True, text=True)
    if res.returncode:
        sys.stderr.write(res.stderr[-4000:])
        raise SystemExit(f"{name}: the measuring process failed ({res.returncode})")
    return json.loads(res.stdout.strip().splitlines()[-1])


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM), MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def proc_cpu_s(stat: str) -> float:
    """User + system CPU seconds so far of the process or thread whose /proc stat file is `stat`
    (`/proc/self/stat`, `/proc/PID/stat`, `/proc/self/task/TID/stat`)."""
    fields = Path(stat).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
