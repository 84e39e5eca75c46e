"""The HTTP client of served models (base layer): one small client for the three roles a server can play
(`models.<role>: openai:<model>@<base_url>`, fanout/config/remote.py), and the served embedder's identity.

- `ServedClient.post` sends one JSON request with the `remote:` section's timeout, retries what a retry can
  fix (a timeout, a connection refused or reset, a body cut short or unreadable, 429 with its Retry-After, 5xx)
  with a doubling backoff, and raises a `ModelError` naming the backend, the request and the answer for the
  rest (4xx, an answer of the wrong shape) or after the last retry. `ServedClient.map` runs requests on
  `remote.concurrency` threads: that bounds the requests one process (one Ray pool actor) has in flight.
- The bearer key comes from `remote.api_key_file` or the variable `remote.api_key_env`; it lives in the
  client's headers only and every message this module builds is scrubbed of it (`scrub`).
- `served_identity`: a served embedder is `openai:<model>@<host>` plus a fingerprint of its vectors for fixed
  probe texts, so an index built through one server refuses a server with another model or other weights, as
  a different GGUF file is refused. Vectors of one text from one server are stable within float noise; a
  fingerprint within that noise of one this machine recorded before (`<cache>/served/fingerprints.json`)
  keeps the recorded id.

Imports fanout.config, fanout.errors and (lazily) numpy and fanout/models/files.py; HTTP is the standard
library's http.client (httpx is not installed: mcp 2.x brings a fork of its own).
"""

from __future__ import annotations

import email.utils
import hashlib
import http.client
import json
import logging
import math
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from fanout.config import Config, RemoteConfig, ServedSpec
from fanout.errors import ModelError

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

# The probe texts of a served embedder's fingerprint: fixed forever (a change would refuse every index built
# through a server). Short, in the two languages of the benchmark, and one sent a request so that no
# batching on the server's side moves the sums.
PROBES = ("fanout probe: how do I change the default font size of the editor?",
          "fanout probe: Как изменить размер шрифта в редакторе по умолчанию?",
          "fanout probe: 12 + 30 = 42")
PROBE_COSINE = 1 - 1e-5  # two fingerprints this close on every probe are one model (a requantized one is ~1e-3 off)
EXCERPT = 240  # characters of a server's answer quoted in an error message


def read_key(rcfg: RemoteConfig) -> str:
    """The bearer key: the first line of remote.api_key_file, else $remote.api_key_env, else "" (no header)."""
    if rcfg.api_key_file:
        path = Path(rcfg.api_key_file).expanduser()
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ModelError(f"remote.api_key_file {str(path)!r} cannot be read ({e.strerror or type(e).__name__}); "
                             "give a readable file whose first line is the key, or set remote.api_key_file: '' "
                             f"and put the key in ${rcfg.api_key_env}") from None
        return lines[0].strip() if lines else ""
    return os.environ.get(rcfg.api_key_env, "").strip() if rcfg.api_key_env else ""


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ServedClient:
    """One server of one role: JSON requests with retries, `concurrency` of them in flight at most (one
    keep-alive connection per thread; the standard library's http.client, no proxy)."""

    def __init__(self, spec: ServedSpec, rcfg: RemoteConfig, role: str):
        self.spec, self.rcfg, self.role = spec, rcfg, role
        self._key = read_key(rcfg)
        url = urllib.parse.urlsplit(spec.base_url)
        self._https, self._host, self._port = url.scheme == "https", url.hostname or "", url.port
        self._prefix = url.path.rstrip("/")
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            self._headers["Authorization"] = f"Bearer {self._key}"
        self._local = threading.local()
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.stats: dict[str, int] = {"requests": 0, "retries": 0, "failed": 0}

    @property
    def backend(self) -> str:
        return self.spec.name

    def scrub(self, text: str) -> str:
        """`text` without the key (a server may echo a header back in its error body)."""
        return text.replace(self._key, "<key>") if self._key and len(self._key) >= 4 else text

    def error(self, what: str, problem: str, fix: str) -> ModelError:
        return ModelError(self.scrub(f"{self.backend} ({self.role}) {what}: {problem}; {fix}"))

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection and whether it is new (a kept one may have been closed by the server)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, False
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.rcfg.timeout_s,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.rcfg.timeout_s)
        self._local.conn = conn
        return conn, True

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def _send(self, url_path: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
        """One POST on this thread's connection; a kept connection the server had closed is reopened once."""
        for _ in range(2):
            conn, fresh = self._connection()
            try:
                conn.request("POST", url_path, body=data, headers=self._headers)
                r = conn.getresponse()
                body = r.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self._drop()
                if fresh:
                    raise ConnectionError(f"{type(e).__name__}: {e}") from None
                continue  # the server closed an idle kept-alive connection: open a new one, no retry counted
            except BaseException:
                self._drop()
                raise
            if r.will_close:
                self._drop()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body
        raise ConnectionError("the server closed the connection twice")

    def post(self, path: str, payload: dict[str, Any], what: str, retries: int | None = None,
             at_root: bool = False) -> Any:
        """POST `payload` to `<base_url>/<path>` and return the decoded JSON answer; `what` says what was sent
        (for messages: "POST /embeddings of 32 texts"). Retries as the module docstring says, `retries` times
        when given (else remote.max_retries). A ModelError after an HTTP answer carries its `status`.
        `at_root`: the path is under the server's root, the base URL less a trailing /v1 (servers keep their
        own endpoints such as /tokenize there)."""
        prefix = self._prefix.removesuffix("/v1") if at_root else self._prefix
        url_path = f"{prefix}/{path}"
        base = self.spec.base_url.rstrip("/")
        url = f"{base.removesuffix('/v1') if at_root else base}/{path}"
        data = json.dumps(payload).encode("utf-8")
        attempt, limit = 0, self.rcfg.max_retries if retries is None else retries
        while True:
            wait, status = None, None
            with self._lock:
                self.stats["requests"] += 1
            try:
                code, headers, body = self._send(url_path, data)
                text = body.decode("utf-8", "replace")
                status = code if not 200 <= code < 300 else None
                if status is None:
                    try:
                        return json.loads(text)
                    except ValueError:  # cut short or not JSON: a retry may get it whole
                        problem = f"an unreadable answer ({len(body)} bytes: {self._excerpt(text)!r})"
                elif code == 429 or code >= 500:
                    problem = f"HTTP {status} {self._excerpt(text)!r}"
                    wait = _retry_after(headers.get("retry-after")) if status in (429, 503) else None
                else:  # the request itself is wrong for this server: a retry gets the same answer
                    with self._lock:
                        self.stats["failed"] += 1
                    err = self.error(f"{what} to {url}", f"HTTP {status} {self._excerpt(text)!r}",
                                     self._fix_4xx(status))
                    err.status = status  # type: ignore[attr-defined]  # what the expander's `auto` reads
                    raise err
            except TimeoutError:
                problem = f"no answer within remote.timeout_s={self.rcfg.timeout_s:g}s"
            except (OSError, http.client.HTTPException) as e:  # refused, reset, a body cut short (IncompleteRead)
                problem = f"{type(e).__name__}: {e}"
            if attempt >= limit:
                with self._lock:
                    self.stats["failed"] += 1
                tries = f" (after {attempt + 1} tries)" if attempt else ""
                err = self.error(f"{what} to {url}", problem + tries,
                                 "check that the server is up and serves this model (docs/served-models.md); "
                                 "raise remote.max_retries or remote.timeout_s for a slow or busy server")
                err.status = status  # type: ignore[attr-defined]
                raise err
            delay = min(self.rcfg.max_backoff_s, wait if wait is not None else self.rcfg.backoff_s * 2 ** attempt)
            log.warning("%s", self.scrub(f"{self.backend}: {what}: {problem}; retry {attempt + 1} of "
                                         f"{limit} in {delay:.2f}s"))
            with self._lock:
                self.stats["retries"] += 1
            time.sleep(delay)
            attempt += 1

    def _excerpt(self, text: str) -> str:
        text = self.scrub(" ".join(text.split()))
        return text if len(text) <= EXCERPT else text[:EXCERPT] + f"... ({len(text)} characters)"

    def _fix_4xx(self, status: int) -> str:
        if status in (401, 403):
            return (f"the server refused the key: put a valid one in ${self.rcfg.api_key_env} or "
                    "remote.api_key_file")
        if status == 404:
            return ("the server has no such endpoint or model: check the base URL (most servers want /v1 at its "
                    f"end) and the model name {self.spec.model!r}; docs/served-models.md lists each server's "
                    "endpoints")
        return "the server refused the request as sent; see its answer above and docs/served-models.md"

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`[fn(x) for x in items]`, up to remote.concurrency at a time; in order; the first error raises."""
        items = list(items)
        if len(items) <= 1 or self.rcfg.concurrency == 1:
            return [fn(x) for x in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.rcfg.concurrency, thread_name_prefix=f"served-{self.role}")
        return list(self._pool.map(fn, items))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self._drop()

    def embeddings(self, texts: list[str], what: str = "") -> list[list[float]]:
        """One POST /embeddings: the vectors of `texts`, in order, each checked (numbers, one size)."""
        what = what or f"POST /embeddings of {len(texts)} text(s)"
        body = self.post("embeddings", {"model": self.spec.model, "input": texts}, what)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != len(texts):
            got = f"{len(data)} vectors" if isinstance(data, list) else f"no `data` list ({self._excerpt(json.dumps(body))[:120]!r})"
            raise self.error(what, f"the answer holds {got} for {len(texts)} texts",
                             "point models.embedder at an OpenAI-compatible /v1/embeddings endpoint")
        if all(isinstance(d, dict) and isinstance(d.get("index"), int) for d in data):
            data = sorted(data, key=lambda d: d["index"])
        out = []
        for d in data:
            v = d.get("embedding") if isinstance(d, dict) else None
            if isinstance(v, list) and v and isinstance(v[0], list):  # token-level pooling: not a text vector
                raise self.error(what, "the server returned one vector per token (pooling none)",
                                 "start the server with a pooling mode that gives one vector per text (llama-server "
                                 "--pooling mean/cls/last, or the model's default)")
            if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in v):
                raise self.error(what, "a vector is missing, empty or holds something other than finite numbers",
                                 "check the server's logs; fanout asks for float vectors (encoding_format float)")
            out.append(v)
        if len({len(v) for v in out}) > 1:
            raise self.error(what, f"vectors of different sizes {sorted({len(v) for v in out})} in one answer",
                             "the server mixes models: point models.embedder at one model")
        return out


# a text's token count on a server, per server kind: (path under the server's root, what answers there). The
# `tokenize` body carries each kind's field names at once (llama-server: content/add_special, vLLM:
# prompt/add_special_tokens, TEI: inputs/add_special_tokens); every kind counts with the model's BOS, as the
# local tokenizer does (fanout/actors/tokenizer.py)
TOKENIZE = (("extras/tokenize/count", "llama-cpp-python's server"), ("tokenize", "llama-server, vLLM or TEI"))


class ServedTokens:
    """`count(text)`: the tokens of `text` by the served embedder's own tokenizer, from its server's tokenize
    endpoint (the first of TOKENIZE that answers, found on the first call); None when the server has none
    (Ollama, a proxy that exposes /v1 only): the caller falls back to the chunker's estimate."""

    def __init__(self, client: ServedClient):
        self.client = client
        self.path: str | None = None
        self.tried = False
        self.lock = threading.Lock()

    def _body(self, path: str, text: str) -> dict[str, Any]:
        model = self.client.spec.model
        if path.startswith("extras/"):
            return {"model": model, "input": text}
        return {"model": model, "content": text, "add_special": True, "prompt": text, "add_special_tokens": True,
                "inputs": text}

    def _count(self, path: str, text: str) -> int:
        what = f"POST /{path} of a {len(text)}-character text"
        body = self.client.post(path, self._body(path, text), what, at_root=True)
        if isinstance(body, dict) and isinstance(body.get("count"), int):
            return body["count"]
        if isinstance(body, dict) and isinstance(body.get("tokens"), list):
            return len(body["tokens"])
        if isinstance(body, list) and body and isinstance(body[0], list):  # TEI: one token list per input
            return len(body[0])
        raise self.client.error(what, "the answer holds no token count or token list",
                                "set remote.tokenize: estimate to count by the chunker's estimate")

    def count(self, text: str) -> int | None:
        if self.path is not None:
            return self._count(self.path, text)
        with self.lock:
            if self.tried:
                return None if self.path is None else self._count(self.path, text)
            self.tried = True
            for path, kind in TOKENIZE:
                try:
                    n = self._count(path, text)
                except ModelError as e:
                    status = getattr(e, "status", None)
                    if status is None or not 400 <= status < 500:  # down or failing, not "no such endpoint"
                        raise
                    continue
                self.path = path
                log.info("%s: chunk tokens counted by the server's /%s (%s)", self.client.backend, path, kind)
                return n
        log.warning("%s: the server has no tokenize endpoint (%s): chunks are cut by the chunker's estimate, "
                    "so a chunk may exceed the server's context", self.client.backend,
                    ", ".join(f"/{p}" for p, _ in TOKENIZE))
        return None


def probe_vectors(client: ServedClient) -> list[list[float]]:
    """The server's unit vectors for PROBES, one text a request."""
    import numpy as np

    vecs = [client.embeddings([t], what="POST /embeddings of a probe text (the index's fingerprint)")[0]
            for t in PROBES]
    arr = np.asarray(vecs, dtype=np.float64)
    arr /= np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12)
    return arr.tolist()


def fingerprint(spec: ServedSpec, vecs: list[list[float]]) -> str:
    """sha256 of the model's name, size and probe vectors rounded to 4 decimals."""
    rounded = [[round(x, 4) for x in v] for v in vecs]
    text = json.dumps({"model": spec.model, "dim": len(vecs[0]), "probes": rounded}, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _same(a: list[list[float]], b: list[list[float]]) -> bool:
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        return False
    return all(sum(p * q for p, q in zip(x, y)) >= PROBE_COSINE for x, y in zip(a, b))


def recorded_fingerprint(spec: ServedSpec, vecs: list[list[float]], root: Path | None = None) -> str:
    """The fingerprint id of these probe vectors: one recorded here before for this model name whose vectors are
    within float noise (PROBE_COSINE) of them, else a new one, recorded (`<cache>/served/fingerprints.json`)."""
    from fanout.models.files import cache_root, file_lock

    fp = fingerprint(spec, vecs)
    base = (root or cache_root()) / "served"
    path = base / "fingerprints.json"
    with file_lock(base / "fingerprints.lock"):
        try:
            known = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            known = []
        for entry in known:
            if entry.get("sha256") == fp:
                return fp
        for entry in known:
            if entry.get("model") == spec.model and _same(entry.get("probes", []), vecs):
                return str(entry["sha256"])
        known.append({"model": spec.model, "sha256": fp, "probes": [[round(x, 7) for x in v] for v in vecs]})
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        os.replace(tmp, path)
    return fp


_IDENTITIES: dict[tuple[str, str, str], tuple[str, str]] = {}
_IDENTITY_LOCK = threading.Lock()


def served_identity(cfg: Config, role: str) -> tuple[str, str]:
    """(`openai:<model>@<host>`, fingerprint) of a served role, probed once per process (embedder); an expander or
    reranker is known by its name alone (its caches key on it)."""
    spec = cfg.served(role)
    assert spec is not None, role
    if role != "embedder":
        return spec.name, hashlib.sha256(spec.name.encode()).hexdigest()
    key = (role, spec.model, spec.base_url)
    with _IDENTITY_LOCK:
        if key not in _IDENTITIES:
            client = ServedClient(spec, cfg.remote, role)
            try:
                vecs = probe_vectors(client)
            finally:
                client.close()
            root = Path(cfg.models.cache_dir) if cfg.models.cache_dir else None
            _IDENTITIES[key] = (spec.name, recorded_fingerprint(spec, vecs, root))
        return _IDENTITIES[key]
