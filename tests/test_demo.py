"""`fanout demo` (the README's first command): it indexes the sample vault with the real embedder, answers the
sample batch, keeps its index, and the three commands it prints at the end work as printed."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fanout.cli.main import main
from fanout.serve.client import PORT_FILE

pytestmark = pytest.mark.model
REPO = Path(__file__).resolve().parents[1]


def test_demo_keeps_its_index_and_the_printed_commands_work(demo_run, capsys, monkeypatch):
    db = demo_run.db  # `fanout demo --db DB`, run once per session by the fixture (tests/conftest.py)
    assert demo_run.code == 0
    out = demo_run.out
    assert "right page first for" in out and (db / "samples.manifest.json").exists()
    tail = out.split("try next:", 1)[1].splitlines()
    cmds = [ln.strip() for ln in tail if ln.strip().startswith(".venv/bin/fanout ")]
    assert [c.split()[1] for c in cmds] == ["query", "search", "serve"], out
    monkeypatch.setenv("FANOUT_NO_SERVER", "1")
    for line in cmds[:2]:  # query and search, in-process, as a shell would split them
        argv = shlex.split(line)[1:]
        assert main(argv) == 0, line
        res = capsys.readouterr()
        assert res.out.strip(), f"{line} printed nothing"
    assert "Team/Conventions.md" in res.out  # the tag filter kept the team's note
    serve = shlex.split(cmds[2])
    proc = subprocess.Popen([sys.executable, "-m", "fanout.cli.main", *serve[1:]], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not (db / PORT_FILE).exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(20)
