"""`fanout serve`: the CLI finds it by its port file, gets the same answers as in-process, and falls back to
in-process when the server runs another config, is gone, or is told not to be used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fanout.cli.main import main
from fanout.serve.client import PORT_FILE

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_db):
    root = tmp_path_factory.mktemp("serve")
    db = root / "db"
    shutil.copytree(tiny_db, db)
    cfg = root / "noexpand.yaml"
    cfg.write_text("extends: local\nexpand:\n  enabled: false\n", encoding="utf-8")
    with open(root / "serve.log", "w") as log:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "fanout.cli.main", "serve", "--db", str(db), "-c", "t",
                                 "--config", str(cfg)], cwd=REPO, stdout=log, stderr=log,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 180
    while not (db / PORT_FILE).exists():
        assert proc.poll() is None and time.monotonic() < deadline, (root / "serve.log").read_text()
        time.sleep(0.2)
    yield db, cfg, proc
    if proc.poll() is None:
        proc.terminate()
        proc.wait(20)


def ask(capsys, db: Path, cfg: Path | str, *extra: str) -> tuple[int, list, str]:
    code = main(["query", "how do I highlight code syntax", "--db", str(db), "-c", "t", "--config", str(cfg),
                 "--json", "-v", *extra])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else [], out.err


def test_port_file_is_private_and_names_the_config(served):
    db, cfg, proc = served
    info = json.loads((db / PORT_FILE).read_text())
    assert info["pid"] == proc.pid and info["config"] == str(cfg.resolve()) and len(info["token"]) == 32
    assert (db / PORT_FILE).stat().st_mode & 0o077 == 0


def test_the_cli_uses_the_server_and_gets_the_same_answer(capsys, served):
    db, cfg, _ = served
    code, warm, err = ask(capsys, db, cfg)
    port = json.loads((db / PORT_FILE).read_text())["port"]
    assert code == 0 and f"fanout serve :{port}" in err
    code, cold, err = ask(capsys, db, cfg, "--no-server")
    assert code == 0 and "in-process" in err
    assert [(r["path"], r["score"]) for r in warm] == [(r["path"], r["score"]) for r in cold]
    assert warm[0]["path"] == "Editing/Code blocks.md"


def test_user_errors_come_back_from_the_server_as_messages(capsys, served):
    db, cfg, _ = served
    code = main(["search", "x", "--db", str(db), "-c", "nope", "--config", str(cfg)])
    assert code == 2 and "no index 'nope'" in capsys.readouterr().err


def test_another_config_or_env_means_in_process(capsys, served, monkeypatch):
    db, cfg, _ = served
    code, res, err = ask(capsys, db, "local", "--no-expand")
    assert code == 0 and "in-process" in err and res[0]["path"] == "Editing/Code blocks.md"
    monkeypatch.setenv("FANOUT_NO_SERVER", "1")
    _, _, err = ask(capsys, db, cfg)
    assert "in-process" in err


def test_stopping_removes_the_port_file_and_a_stale_one_is_ignored(capsys, served):
    db, cfg, proc = served
    info = (db / PORT_FILE).read_text()
    proc.terminate()
    proc.wait(20)
    assert not (db / PORT_FILE).exists()
    (db / PORT_FILE).write_text(info)  # as if the server had been killed -9
    code, res, err = ask(capsys, db, cfg)
    assert code == 0 and "in-process" in err and res[0]["path"] == "Editing/Code blocks.md"
