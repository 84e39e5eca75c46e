"""Shared fixtures: a tiny EN+RU vault written here, the local config, one real index per session."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

os.environ.setdefault("LANCEDB_LOG", "error")

NOTES = {
    "Sync/Sync your notes.md": """---
aliases: [Obsidian Sync, Sync/Settings]
tags: sync
description: Keep notes in step across devices.
---
Sync keeps your vault the same on every device.

## Set up sync
Open **Settings > Sync**, sign in and choose a remote vault. Changes upload within seconds.

## Version history
Every file keeps its versions for 12 months; restore one from the file's version history.
""",
    "Editing/Code blocks.md": """---
aliases: Fenced code
---
# Code blocks

Wrap code in three backticks to make a fenced code block.

```bash
# this is a comment, not a heading
echo hello
```

## Syntax highlighting
Add the language name after the backticks, for example `python`, to colour the code.
""",
    "Linking/Internal links.md": """---
aliases:
  - Wikilinks
  - Linking/Old links
---
Link one note to another with [[Internal links|wikilinks]]: type `[[` and pick a note.

## Link to a heading
Add `#` and the heading after the note name: `[[Note#Heading]]`.
""",
    "Plugins/Daily notes.md": """---
aliases: []
---
The Daily notes plugin opens a note named after today's date. Set the date format and a template
for new daily notes in the plugin's settings.
""",
    "Синхронизация/Синхронизация заметок.md": """---
aliases: [Sync your notes]
---
Синхронизация хранит одинаковое хранилище на всех ваших устройствах.

## Настройка синхронизации
Откройте **Настройки > Синхронизация**, войдите в аккаунт и выберите удалённое хранилище.
""",
    "Рецепты/Блины.md": """---
aliases: Pancakes
---
Для блинов смешайте молоко, яйца и муку, дайте тесту постоять полчаса и жарьте на горячей сковороде.
""",
}


def write_vault(root: Path, notes: dict[str, str] = NOTES) -> Path:
    for rel, text in notes.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


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


# -- test tiers: `make test-fast` runs `-m "not model and not ray"` with no model installed -------------------
MODEL_FIXTURES = {"runner", "tiny_db"}  # the local profile's real models (transitively: mcp_db, served, ...)
# modules whose tests load a real model or start Ray without going through the fixtures above
MODEL_MODULES = {"test_models", "test_embedder", "test_expander", "test_reranker", "test_walkthrough",
                 "test_served_real"}
RAY_MODULES = {"test_ray_data", "test_cluster", "test_ray_processor", "test_readme_api", "test_served_ray"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        mod = item.module.__name__.rsplit(".", 1)[-1]
        if MODEL_FIXTURES & set(item.fixturenames) or mod in MODEL_MODULES:
            item.add_marker(pytest.mark.model)
        if mod in RAY_MODULES:
            item.add_marker(pytest.mark.ray)


@contextlib.contextmanager
def running_serve(db: Path, collection: str, config_text: str, root: Path):
    """`fanout serve` on `db` in a process of its own, with a config written from `config_text`; yields the port
    file's content (port, token) once it is there (a link planted at its name does not count); the server's
    output goes to `root / "serve.log"`. Stopped at the end."""
    import json
    import os
    import subprocess
    import sys
    import time

    from fanout.serve.client import PORT_FILE

    cfg = root / "serve-config.yaml"
    cfg.write_text(config_text, encoding="utf-8")
    repo = Path(__file__).resolve().parents[1]
    with open(root / "serve.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fanout.cli.main", "serve", "--db", str(db), "-c",
                                 collection, "--config", str(cfg)], cwd=repo, stdout=log, stderr=log,
                                env={**os.environ, "PYTHONPATH": str(repo)})
    try:
        deadline = time.monotonic() + 120
        while (db / PORT_FILE).is_symlink() or not (db / PORT_FILE).exists():
            assert proc.poll() is None and time.monotonic() < deadline, (root / "serve.log").read_text()
            time.sleep(0.1)
        yield json.loads((db / PORT_FILE).read_text(encoding="utf-8"))
    finally:
        proc.terminate()
        proc.wait(20)
