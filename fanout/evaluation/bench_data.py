"""Loading the Obsidian Help retrieval benchmark (queries, agent fields, published runs and table).

The benchmark lives outside the repository (its docs carry no licence): by default in
``<repo>/../shared/eval/obsidian-help``, or wherever the env var ``FANOUT_BENCH`` points.
Query ids are ``<lang>:<orig_id>`` (``en:q001``, ``ru:t-ru-017``); agent-field and run files use the
golden files' own ids and get the prefix from the file's language.
"""

from __future__ import annotations

import json
import logging
import os
import re
import unicodedata
from pathlib import Path
from typing import Any

from fanout.errors import BenchNotFoundError, UserError

logger = logging.getLogger(__name__)

BENCH_ENV = "FANOUT_BENCH"
LANGS: tuple[str, ...] = ("en", "ru")
SETS: tuple[str, ...] = ("en-base", "en-tricky", "ru-base", "ru-tricky")
SET_TITLES: dict[str, str] = {
    "en-base": "English base",
    "en-tricky": "English tricky",
    "ru-base": "Russian base",
    "ru-tricky": "Russian tricky",
}
AGENT_FIELDS: tuple[str, ...] = ("short_query", "rephrased_query", "expected_answer")
_RUN_NAME = re.compile(r"^(?P<system>.+)-(?P<lang>en|ru)$")


def default_bench_dir() -> Path:
    """Return the benchmark folder from ``$FANOUT_BENCH`` or ``<repo>/../shared/eval/obsidian-help``."""
    env = os.environ.get(BENCH_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[3] / "shared" / "eval" / "obsidian-help"


def resolve_bench_dir(bench_dir: str | Path | None = None) -> Path:
    """Return an existing benchmark folder or raise :class:`BenchNotFoundError` with a clear message."""
    path = Path(bench_dir).expanduser() if bench_dir is not None else default_bench_dir()
    if not (path / "queries" / "obsidian-help.jsonl").is_file():
        raise BenchNotFoundError(
            f"Obsidian Help benchmark not found at {path} (expected queries/obsidian-help.jsonl). "
            f"Set ${BENCH_ENV} or pass the folder explicitly."
        )
    return path


def set_key(name: str) -> tuple[int, int, str]:
    """Sort key for set names: the benchmark's four in their order, then any other (own data) by name."""
    return (0, SETS.index(name), "") if name in SETS else (1, 0, name)


def set_name(lang: str, subset: str) -> str:
    """Return the set key (``en-base``) for a query's vault language and subset."""
    return f"{lang}-{subset}"


def nfc(text: str) -> str:
    """Return ``text`` in Unicode NFC (published runs sometimes store NFD paths)."""
    return unicodedata.normalize("NFC", text)


def load_queries(bench_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Load the 236 judged queries with ids ``<lang>:<orig_id>`` and NFC-normalised judgments."""
    path = resolve_bench_dir(bench_dir) / "queries" / "obsidian-help.jsonl"
    queries: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            q = json.loads(line)
            q["id"] = f"{q['lang']}:{q['orig_id']}"
            q["relevant"] = [nfc(p) for p in q.get("relevant") or []]
            q["partial"] = [nfc(p) for p in q.get("partial") or []]
            q["set"] = set_name(q["lang"], q["subset"])
            queries.append(q)
    logger.debug("loaded %d queries from %s", len(queries), path)
    return queries


def read_agent_fields(path: str | Path, lang: str) -> dict[str, dict[str, str]]:
    """Read one agent-fields file (list of objects or id->object map) keyed ``<lang>:<id>``.

    Missing, null or non-string fields become ``""`` so a weak agent's partial output still loads.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    items = [dict(v, id=k) for k, v in data.items()] if isinstance(data, dict) else list(data or [])
    out: dict[str, dict[str, str]] = {}
    for item in items:
        if not isinstance(item, dict) or not item.get("id"):
            continue
        fields = {f: (v if isinstance(v := item.get(f), str) else "").strip() for f in AGENT_FIELDS}
        out[f"{lang}:{item['id']}"] = fields
    return out


def load_agent_fields(bench_dir: str | Path | None = None) -> dict[str, dict[str, str]]:
    """Load ``agent-fields/agent-fields-{en,ru}.json`` keyed ``<lang>:<id>`` (missing files skipped)."""
    root = resolve_bench_dir(bench_dir) / "agent-fields"
    out: dict[str, dict[str, str]] = {}
    for lang in LANGS:
        path = root / f"agent-fields-{lang}.json"
        if path.is_file():
            out.update(read_agent_fields(path, lang))
        else:
            logger.warning("agent fields file missing: %s", path)
    return out


def run_name_parts(path: str | Path) -> tuple[str, str | None]:
    """Split a run file name ``<system>-<lang>.json`` into ``(system, lang)``; lang is None if absent."""
    stem = Path(path).name.removesuffix(".json")
    m = _RUN_NAME.match(stem)
    return (m["system"], m["lang"]) if m else (stem, None)


def parse_run(obj: dict[str, Any], lang: str) -> dict[str, list[str]]:
    """Map a run file's ``results`` (golden ids) to ``{<lang>:<id>: [paths]}``; ids already prefixed stay."""
    results = obj.get("results") or {}
    out: dict[str, list[str]] = {}
    for qid, paths in results.items():
        key = qid if ":" in qid else f"{lang}:{qid}"
        out[key] = [str(p) for p in (paths or [])]
    return out


def load_published_runs(bench_dir: str | Path | None = None) -> dict[str, dict[str, list[str]]]:
    """Load every ``runs/<system>-<lang>.json`` merged per system: ``{system: {<lang>:<id>: [paths]}}``."""
    runs: dict[str, dict[str, list[str]]] = {}
    for path in sorted((resolve_bench_dir(bench_dir) / "runs").glob("*.json")):
        system, lang = run_name_parts(path)
        if lang is None:
            logger.warning("skipping run file without -en/-ru suffix: %s", path)
            continue
        obj = json.loads(path.read_text(encoding="utf-8"))
        runs.setdefault(str(obj.get("system") or system), {}).update(parse_run(obj, lang))
    return runs


def load_published_table(bench_dir: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Parse the README's published table: ``{run: {"system": str, <set>: (ndcg@5, recall@10)}}``."""
    text = (resolve_bench_dir(bench_dir) / "README.md").read_text(encoding="utf-8")
    cell = re.compile(r"^\s*([0-9]*\.[0-9]+)\s*\(\s*([0-9]*\.[0-9]+)\s*\)\s*$")
    table: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cols) != 2 + len(SETS) or not all(cell.match(c) for c in cols[2:]):
            continue
        row: dict[str, Any] = {"system": cols[1]}
        for name, raw in zip(SETS, cols[2:], strict=True):
            m = cell.match(raw)
            assert m is not None
            row[name] = (float(m[1]), float(m[2]))
        table[cols[0]] = row
    return table


def corpus_dir(bench_dir: str | Path | None, lang: str) -> Path:
    """Return ``corpus/<lang>`` of the benchmark (the vault searched for that language)."""
    if lang not in LANGS:
        raise UserError(f"unknown benchmark language {lang!r}; expected one of {LANGS}")
    path = resolve_bench_dir(bench_dir) / "corpus" / lang
    if not path.is_dir():
        raise BenchNotFoundError(f"benchmark corpus folder missing: {path}")
    return path
