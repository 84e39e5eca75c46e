"""Where an index, a manifest or a batch file lives: one place that turns a user's string into URIs.

A `--db`, input or output string is a local path (relative or absolute, any folder name), `file://...`, or an
object-store URI (`s3://bucket/key`, `gs://bucket/key`, `az://container/key`). `normalize_uri` makes local
paths absolute (LanceDB's `connect_async` takes a bare relative name such as `db` for a LanceDB Cloud address)
and keeps object-store URIs as they are; `filesystem` gives the matching `pyarrow.fs` filesystem and path;
`storage_options` gives LanceDB's `storage_options` dict. Credentials come from the config's `storage:`
section or the usual environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
AWS_REGION, AWS_ENDPOINT_URL, AZURE_STORAGE_ACCOUNT_NAME/KEY, GOOGLE_APPLICATION_CREDENTIALS) and are never
logged: `redact()` them before showing options anywhere.

Never use `pathlib.Path` on a URI: `Path("s3://b/db")` is `s3:/b/db`.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import shutil
import threading
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from fanout.errors import DiskFull, StorageError  # declared there; importable from here as they were

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from fanout.config import StorageConfig

log = logging.getLogger(__name__)

REMOTE_SCHEMES = ("s3", "gs", "az")  # object stores LanceDB (object_store) and pyarrow.fs both speak
ALLOWED = "a local path, file:///abs/path, s3://bucket/path, gs://bucket/path or az://container/path"
_SECRET_WORDS = ("secret", "key", "token", "password", "sas", "credential")


_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXTS = ("no space left on device", "os error 28", "disk quota exceeded", "os error 122")


def is_disk_full(e: BaseException) -> bool:
    """True for ENOSPC / EDQUOT, raised by Python (OSError) or by Lance/Arrow (their message says so)."""
    if isinstance(e, DiskFull):
        return True
    if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
        return True
    text = str(e).casefold()
    return any(t in text for t in _FULL_TEXTS)


def free_bytes(uri: str | os.PathLike) -> int | None:
    """Free bytes where a local location is (its nearest existing folder); None for an object store."""
    try:
        path = normalize_uri(uri)
    except StorageError:
        return None
    if scheme(path) != "file":
        return None
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def free_text(uri: str | os.PathLike) -> str:
    """` (12.3 MB free)` for a local location, '' for an object store."""
    free = free_bytes(uri)
    return "" if free is None else f" ({free / 1e6:.1f} MB free)"


def scheme(uri: str) -> str:
    """`s3`, `gs`, `az` or `file` (every local path) for a normalised URI."""
    head = uri.split("://", 1)[0] if "://" in uri else ""
    return head if head in REMOTE_SCHEMES else "file"


def is_remote(uri: str | os.PathLike) -> bool:
    return scheme(normalize_uri(uri)) != "file"


def normalize_uri(s: str | os.PathLike) -> str:
    """A location as LanceDB and pyarrow accept it: an absolute local path or `scheme://bucket/key`.

    `db`, `./x/db2`, `~/kb/db` and `file:///abs/db` become absolute local paths; `s3://b/db/` becomes
    `s3://b/db`. Raises StorageError for an empty string, an unknown scheme or a URI without a bucket.
    """
    if isinstance(s, os.PathLike):
        s = os.fspath(s)
    if not isinstance(s, str) or not s.strip():
        raise StorageError(f"location {s!r} is empty; give {ALLOWED}")
    s = s.strip()
    if "://" not in s:
        return os.path.abspath(os.path.expanduser(s))
    head, rest = s.split("://", 1)
    head = head.lower()
    if head == "file":
        u = urlparse(s)
        if u.netloc not in ("", "localhost"):
            raise StorageError(f"location {s!r}: file URIs take an absolute path (file:///abs/path), "
                               f"not a host {u.netloc!r}")
        return os.path.abspath(unquote(u.path))
    if head not in REMOTE_SCHEMES:
        raise StorageError(f"location {s!r}: scheme {head!r} is not supported; allowed: "
                           f"{sorted(('file', *REMOTE_SCHEMES))}, i.e. {ALLOWED}")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise StorageError(f"location {s!r} names no bucket; write it as {head}://bucket/path")
    key = posixpath.normpath("/" + key).lstrip("/") if key.strip("/") else ""
    return f"{head}://{bucket}/{key}" if key else f"{head}://{bucket}"


def join(uri: str | os.PathLike, *parts: str) -> str:
    """`join("s3://b/db", "x.json")` -> `s3://b/db/x.json`; local paths join with the OS separator."""
    uri = normalize_uri(uri)
    if scheme(uri) == "file":
        return os.path.join(uri, *parts)
    return "/".join([uri.rstrip("/"), *(p.strip("/") for p in parts)])


def _env(*names: str) -> str:
    for n in names:
        if os.environ.get(n):
            return os.environ[n]
    return ""


def _resolved(cfg: StorageConfig | None) -> dict[str, Any]:
    """Config values, else the environment's: endpoint, region, credentials, allow_http, extra options."""
    from fanout.config import StorageConfig

    cfg = cfg or StorageConfig()
    endpoint = cfg.endpoint or _env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT")
    return {
        "endpoint": endpoint,
        "region": cfg.region or _env("AWS_REGION", "AWS_DEFAULT_REGION"),
        "key_id": cfg.access_key_id or _env("AWS_ACCESS_KEY_ID"),
        "secret": cfg.secret_access_key or _env("AWS_SECRET_ACCESS_KEY"),
        "token": cfg.session_token or _env("AWS_SESSION_TOKEN"),
        "allow_http": cfg.allow_http or endpoint.startswith("http://"),
        "options": dict(cfg.options or {}),
    }


def storage_options(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> dict[str, str]:
    """LanceDB's `storage_options` for `uri` (empty for a local path). Contains secrets: never log it."""
    uri = normalize_uri(uri)
    kind = scheme(uri)
    if kind == "file":
        return {}
    r = _resolved(cfg)
    out: dict[str, str] = {}
    if kind == "s3":
        for key, val in (("aws_endpoint", r["endpoint"]), ("aws_region", r["region"]),
                         ("aws_access_key_id", r["key_id"]), ("aws_secret_access_key", r["secret"]),
                         ("aws_session_token", r["token"])):
            if val:
                out[key] = val
    elif kind == "az":
        for key, env in (("azure_storage_account_name", "AZURE_STORAGE_ACCOUNT_NAME"),
                         ("azure_storage_account_key", "AZURE_STORAGE_ACCOUNT_KEY")):
            if _env(env):
                out[key] = _env(env)
    elif kind == "gs" and _env("GOOGLE_APPLICATION_CREDENTIALS"):
        out["google_service_account"] = _env("GOOGLE_APPLICATION_CREDENTIALS")
    if r["allow_http"]:
        out["allow_http"] = "true"
    out.update({str(k): str(v) for k, v in r["options"].items()})
    return out


def redact(options: dict[str, Any]) -> dict[str, Any]:
    """A copy safe to log: values of keys that look like credentials become `***`."""
    return {k: ("***" if any(w in k.lower() for w in _SECRET_WORDS) and "endpoint" not in k.lower() else v)
            for k, v in options.items()}


_FS_LOCK = threading.Lock()
_FS_CACHE: dict[tuple, Any] = {}


def filesystem(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> tuple[pafs.FileSystem, str]:
    """(pyarrow filesystem, path inside it) for `uri`: `s3://b/k` -> (S3FileSystem, `b/k`)."""
    import pyarrow.fs as pafs

    uri = normalize_uri(uri)
    kind = scheme(uri)
    if kind == "file":
        return pafs.LocalFileSystem(), uri
    path = uri.split("://", 1)[1]
    r = _resolved(cfg)
    key = (kind, r["endpoint"], r["region"], r["key_id"], r["secret"], r["token"], r["allow_http"],
           tuple(sorted(r["options"].items())))
    with _FS_LOCK:
        fs = _FS_CACHE.get(key)
        if fs is None:
            fs = _FS_CACHE[key] = _make_fs(kind, r)
    return fs, path


def _make_fs(kind: str, r: dict[str, Any]):
    import pyarrow.fs as pafs

    if kind == "s3":
        kw: dict[str, Any] = {}
        if r["key_id"] and r["secret"]:
            kw.update(access_key=r["key_id"], secret_key=r["secret"], session_token=r["token"] or None)
        if r["region"]:
            kw["region"] = r["region"]
        if r["endpoint"]:
            u = urlparse(r["endpoint"])
            kw["endpoint_override"] = u.netloc or u.path
            kw["scheme"] = u.scheme or ("http" if r["allow_http"] else "https")
        return pafs.S3FileSystem(**kw)
    if kind == "gs":
        return pafs.GcsFileSystem()
    name, key = _env("AZURE_STORAGE_ACCOUNT_NAME"), _env("AZURE_STORAGE_ACCOUNT_KEY")
    if not name:
        raise StorageError("az:// needs an account: set AZURE_STORAGE_ACCOUNT_NAME (and "
                           "AZURE_STORAGE_ACCOUNT_KEY, or a credential the Azure SDK finds)")
    return pafs.AzureFileSystem(account_name=name, account_key=key or None)


# -- small helpers ---------------------------------------------------------------------------------------
def exists(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> bool:
    import pyarrow.fs as pafs

    fs, path = filesystem(uri, cfg)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def read_bytes(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> bytes:
    """The whole object; FileNotFoundError (naming the URI) when it is not there."""
    fs, path = filesystem(uri, cfg)
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{normalize_uri(uri)} does not exist") from None
    except OSError as e:
        if "not found" in str(e).lower() or "nosuchkey" in str(e).lower() or "does not exist" in str(e).lower():
            raise FileNotFoundError(f"{normalize_uri(uri)} does not exist") from None
        raise


def read_text(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> str:
    return read_bytes(uri, cfg).decode("utf-8")


def write_bytes(uri: str | os.PathLike, data: bytes, cfg: StorageConfig | None = None) -> None:
    """Write a whole object so that readers see the old or the new content, never a part.

    Local: a temporary file in the same folder, then an atomic rename. Object stores: one PUT (an object
    appears whole when its upload completes; there is no rename to use).
    """
    fs, path = filesystem(uri, cfg)
    if scheme(normalize_uri(uri)) == "file":
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".{os.path.basename(path)}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return
    with fs.open_output_stream(path) as f:
        f.write(data)


def write_text(uri: str | os.PathLike, text: str, cfg: StorageConfig | None = None) -> None:
    write_bytes(uri, text.encode("utf-8"), cfg)


def makedirs(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> None:
    """Create a local folder (object stores have no folders: a no-op there)."""
    fs, path = filesystem(uri, cfg)
    if scheme(normalize_uri(uri)) == "file":
        fs.create_dir(path, recursive=True)


def list_dir(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> list[str]:
    """Names (not paths) directly under `uri`, sorted; [] when it does not exist."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri, cfg)
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(posixpath.basename(i.path.rstrip("/")) for i in infos)


def remove(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> None:
    """Delete one file / object if it exists."""
    fs, path = filesystem(uri, cfg)
    if exists(uri, cfg):
        fs.delete_file(path)


def remove_if_there(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> bool:
    """Delete the file or object at `uri`; True when there was one."""
    if not exists(uri, cfg):
        return False
    fs, path = filesystem(uri, cfg)
    fs.delete_file(path)
    return True


def remove_tree(uri: str | os.PathLike, cfg: StorageConfig | None = None) -> None:
    """Delete a folder (or every object under a prefix) and what it holds; nothing if it does not exist."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri, cfg)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        return
    if info.type == pafs.FileType.File:
        fs.delete_file(path)
        return
    fs.delete_dir_contents(path, missing_dir_ok=True)
    if scheme(normalize_uri(uri)) == "file":
        fs.delete_dir(path)


def move(src: str | os.PathLike, dst: str | os.PathLike, cfg: StorageConfig | None = None) -> None:
    """Rename locally (atomic); on object stores copy then delete (not atomic: write once where you can)."""
    fs, a = filesystem(src, cfg)
    fs2, b = filesystem(dst, cfg)
    if fs2 is not fs and type(fs2) is not type(fs):
        raise StorageError(f"cannot move {normalize_uri(src)} to {normalize_uri(dst)}: different filesystems")
    fs.move(a, b)


def open_input(uri: str | os.PathLike, cfg: StorageConfig | None = None):
    """A binary input file object (seekable) for pyarrow readers: `pq.read_table(open_input(uri))`."""
    fs, path = filesystem(uri, cfg)
    return fs.open_input_file(path)


def open_output(uri: str | os.PathLike, cfg: StorageConfig | None = None):
    """A binary output stream; the object appears when the stream is closed. Local folders are created."""
    fs, path = filesystem(uri, cfg)
    if scheme(normalize_uri(uri)) == "file":
        os.makedirs(os.path.dirname(path), exist_ok=True)
    return fs.open_output_stream(path)
