"""The wheel: installing fanout adds the import name `fanout` and nothing else (plus its dist-info and the
`fanout` console script), and the installed package works without the checkout: `fanout --help`, and the API
indexing and searching the bundled sample vault with the fake profile, run from another directory.

The fresh venv reuses the dependencies already installed in the project's venv (no rebuild of
llama-cpp-python): they come in through PYTHONPATH, which (unlike a .pth file) does not run the project venv's
.pth files, so the editable install's path to the checkout is never on sys.path there (the test checks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _clean_env() -> dict[str, str]:
    """The environment without a PYTHONPATH or venv of the caller's (a checkout on the path would make pip
    take the project as installed already)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout's files (tracked, and new ones git does not ignore), so the
    build's egg-info and build/ folders never land in the checkout."""
    import shutil

    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(out), str(src)], check=True, capture_output=True, text=True, cwd=out, env=_clean_env())
    (whl,) = out.glob("fanout_search-*.whl")
    return whl


def test_the_wheel_holds_fanout_alone(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"fanout", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, tops
    for need in ("fanout/__init__.py", "fanout/actors/embedder.py", "fanout/pipelines/search.py",
                 "fanout/configs/local.yaml", "fanout/configs/fake.yaml", "fanout/configs/models.yaml",
                 "fanout/samples/queries.jsonl", "fanout/grammars/expand.gbnf", "fanout/py.typed"):
        assert need in names, need
    assert not [n for n in names if n.startswith(("fanout/tests", "fanout/bench"))]
    ep = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "fanout = fanout.cli.main:entry" in ep


@pytest.mark.slow
def test_installed_wheel_runs_without_the_checkout(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True, text=True, cwd=tmp_path, env=_clean_env())
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    added = {p.name for p in site.iterdir()} - {"__pycache__"}
    assert {n for n in added if not n.endswith(".dist-info")} == {"fanout"}, added
    assert (venv / "bin" / "fanout").exists()
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = _clean_env()
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]  # the project venv's dependencies, no .pth files run
    env["FANOUT_MODELS_OFFLINE"] = "1"
    helped = subprocess.run([str(venv / "bin" / "fanout"), "--help"], check=False, cwd=work, env=env, capture_output=True,
                            text=True, timeout=120)
    assert helped.returncode == 0 and "fanout" in helped.stdout and "index" in helped.stdout, helped.stderr
    code = """
import json, sys
import fanout
from fanout.config import data_dir
assert not any(p.rstrip('/') == sys.argv[1] for p in sys.path), sys.path
with fanout.open("db", collection="samples", config="fake") as kb:
    rep = kb.index(data_dir("samples") / "vault")
    hits = kb.search("how long are backup snapshots kept", n=3)
print(json.dumps({"file": fanout.__file__, "notes": rep.notes, "top": hits[0].path,
                  "actors": __import__("fanout.actors.fake").actors.fake.__file__}))
"""
    run = subprocess.run([str(py), "-c", code, str(ROOT)], check=False, cwd=work, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(site)) and got["actors"].startswith(str(site)), got
    assert got["notes"] > 20 and got["top"].endswith(".md")
    assert (work / "db" / "samples.manifest.json").exists()
