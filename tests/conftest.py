"""Shared fixtures: the local config, one real index of the tiny vault per session, the fake profile, and the
test tiers (markers). Shared helpers (not fixtures) are in tests/support/."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.once import held, run_folder
from tests.support.vault import write_vault

os.environ.setdefault("LANCEDB_LOG", "error")


@pytest.fixture(scope="session")
def cfg():
    from fanout.config import load_config

    return load_config("local")


@pytest.fixture(scope="session")
def runner(cfg):
    from fanout.exec.runner import Runner

    with Runner(cfg) as r:
        yield r


@pytest.fixture(scope="session")
def tiny_vault(tmp_path_factory) -> Path:
    return write_vault(tmp_path_factory.mktemp("vault"))


@pytest.fixture(scope="session")
def tiny_db(tmp_path_factory, tiny_vault, cfg, runner) -> Path:
    """The tiny vault indexed once with the real embedder (read-only for tests that use it)."""
    from fanout.pipelines.index import index_vault

    db = tmp_path_factory.mktemp("db")
    index_vault(tiny_vault, db, "t", cfg, runner)
    return db


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> SimpleNamespace:
    """`fanout demo --db DIR` run once per test run (it indexes the bundled sample vault with the local profile's
    real embedder through index_vault, as a test would): `code`, what it printed (`out`), its index folder (`db`,
    for tests/test_demo.py, which goes on using it) and `index`, a copy of that folder taken as the demo left it.
    Other real-model tests copy `index` instead of embedding the sample vault again (the biggest model cost).
    Where two pytest processes share a run (`make test`'s second pass), the first that needs it runs it and the
    other waits for it (tests/support/once.py)."""
    import contextlib
    import io
    import json
    import shutil

    from fanout.cli.main import main

    base = run_folder(tmp_path_factory) / "demo"
    with held(run_folder(tmp_path_factory) / "demo.lock"):
        done = base / "run.json"
        if not done.exists():
            shutil.rmtree(base, ignore_errors=True)  # what a process that failed midway left
            base.mkdir()
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = main(["demo", "--db", str(base / "demo-db")])
            if code == 0:
                shutil.copytree(base / "demo-db", base / "sample-index")
            done.write_text(json.dumps({"code": code, "out": out.getvalue()}), encoding="utf-8")
        run = json.loads(done.read_text(encoding="utf-8"))
    return SimpleNamespace(code=run["code"], out=run["out"], db=base / "demo-db", index=base / "sample-index")


# the fake model profile, one runner per test module (modules that need another fake config define their own)
@pytest.fixture(scope="module")
def fake_cfg():
    from fanout.config import load_config

    return load_config("fake")


@pytest.fixture(scope="module")
def fake_runner(fake_cfg):
    from fanout.exec.runner import Runner

    with Runner(fake_cfg) as r:
        yield r


# -- test tiers (markers; pyproject.toml lists them): `make test-fast` runs
# `-m "not model and not ray and not slow"` with no model installed. A module whose every test loads a real
# model or starts Ray says so in its `pytestmark`; a test that reaches the real models through these fixtures
# is marked here.
MODEL_FIXTURES = {"runner", "tiny_db", "demo_run"}  # the local profile's real models (transitively: mcp_db, served, ...)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if MODEL_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.model)
