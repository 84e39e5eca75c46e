"""`fanout serve` in a process of its own, for the tests that talk to a running server."""

from __future__ import annotations

import contextlib
from pathlib import Path


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
    repo = Path(__file__).resolve().parents[2]
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
