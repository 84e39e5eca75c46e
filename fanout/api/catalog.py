"""What is in a db folder: collections (one manifest each), their status, their files; removing one.

A collection is registered by indexing it (`fanout collection add NAME VAULT` = `fanout index VAULT -c NAME`):
its manifest `<db>/<name>.manifest.json` records the vault, so no second registry can drift from the index.
"""

from __future__ import annotations

import os
import time
import unicodedata
from pathlib import Path
from typing import Any

from fanout.agent_fields import count_languages
from fanout.config import Config
from fanout.errors import InputMissing
from fanout.store import file_states, manifest, storage
from fanout.store.db import Collection

CACHE_TABLES = ("expansions", "qvec", "rerank")  # <collection>_cache_<name>, see fanout/store/caches.py


def collection_names(db_dir: str | Path, cfg: Config | None = None) -> list[str]:
    """Collections of a db (a folder or an object-store URI): one per `<name>.manifest.json`."""
    return manifest.names(storage.normalize_uri(db_dir), cfg.storage if cfg is not None else None)


def collections(db: str | os.PathLike = ".fanout/db", config: str | os.PathLike | Config | None = None
                ) -> list[str]:
    """The names of the collections in the index at `db` (a folder or an object-store URI), sorted; [] when
    the db does not exist yet (`fanout.collections`)."""
    from fanout.api.checks import resolve_config
    from fanout.api.types import as_path

    return collection_names(storage.normalize_uri(as_path(db, "db")), resolve_config(config))


def _iso(ts: float | None) -> str | None:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts else None


def _disk_bytes(path: Path) -> int | None:
    if not path.exists():
        return None
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def status(col: Collection, cfg: Config, detail: bool = False) -> dict[str, Any]:
    """Collection, vault, notes, chunks, languages, models, index time; `detail` adds table versions and the
    caches' rows and bytes on disk.

    Counts are of the table versions the manifest pins (`Collection.refresh`): what queries serve. A run that
    stopped part-way (a full disk, a kill) may have written newer versions; `detail` shows them as
    `latest_version` until the next `fanout index` completes.
    """
    m = col.refresh()
    updated = (m.get("stats") or {}).get("updated")
    models = cfg.models
    out: dict[str, Any] = {
        "collection": col.name, "vault": m.get("vault"),
        "notes": col.table(col.documents_name).count_rows(),
        "chunks": col.table(col.chunks_name).count_rows(),
        "languages": count_languages(col),
        "models": {"embedder": (m.get("embedder") or {}).get("file"),
                   "expander": models.expander if cfg.expand.enabled else None,
                   "reranker": models.reranker},
        "expansion": "agent fields, else the local expander" if cfg.expand.enabled
        else "agent fields only (local expansion is off)",
        "rerank_default": cfg.rerank.enabled,
        "indexed_at": _iso(updated),
    }
    if detail:
        tables: dict[str, Any] = {}
        names = [col.chunks_name, col.documents_name] + [f"{col.name}_cache_{c}" for c in CACHE_TABLES]
        present = set(col.table_names())
        for n in names:
            if n not in present:
                tables[n] = None
                continue
            t = col.table(n)  # chunks and documents: the pinned versions
            tables[n] = {"rows": t.count_rows(), "version": t.version,
                         "bytes": None if storage.is_remote(col.db_dir) else
                         _disk_bytes(Path(col.db_dir) / f"{n}.lance")}
            latest = col.table_versions().get(n) if n in col.pinned else None
            if latest is not None and latest != t.version:
                tables[n]["latest_version"] = latest
        out["tables"] = tables
        out["db"] = str(col.db_dir)
    return out


def status_text(st: dict[str, Any]) -> str:
    langs = ", ".join(f"{k} {v}" for k, v in st["languages"].items()) or "-"
    lines = [f"collection  {st['collection']}", f"vault       {st['vault']}",
             f"notes       {st['notes']}", f"chunks      {st['chunks']}", f"languages   {langs}",
             f"indexed at  {st['indexed_at']}", f"embedder    {st['models']['embedder']}",
             f"expander    {st['models']['expander'] or 'off'}: {st['expansion']}",
             f"reranker    {st['models']['reranker']} ({'on' if st['rerank_default'] else 'off'} by default)"]
    if "tables" in st:
        lines.append("tables      rows  version  size")
        for n, t in st["tables"].items():
            if t is None:
                lines.append(f"  {n:<34} (none)")
            else:
                size = f"{t['bytes'] / 2**20:.1f} MiB" if t["bytes"] is not None else "?"
                newer = (f"  (v{t['latest_version']} written by an unfinished index run; the next `fanout "
                         "index` completes it)") if t.get("latest_version") else ""
                lines.append(f"  {n:<34} {t['rows']:>7}  v{t['version']:<5} {size}{newer}")
    return "\n".join(lines)


def list_files(col: Collection, prefix: str = "") -> list[dict[str, Any]]:
    """The notes of a collection (path, title, lang, chunks, mtime), optionally under a path prefix (the
    pinned documents version, like searches)."""
    col.refresh()
    cols = ["path", "title", "lang", "n_chunks", "mtime"]
    rows = col.table(col.documents_name).search().select(cols).limit(None).to_arrow().to_pylist()
    pre = unicodedata.normalize("NFC", prefix.strip().lstrip("./"))  # indexed paths are NFC
    return sorted((r for r in rows if r["path"].startswith(pre)), key=lambda r: r["path"])


def list_collections(db_dir: str | Path, cfg: Config | None = None) -> list[dict[str, Any]]:
    out = []
    for name in collection_names(db_dir, cfg):
        col = Collection(str(db_dir), name, cfg)
        m = col.read_manifest()
        stats = m.get("stats") or {}
        out.append({"collection": name, "vault": m.get("vault"), "notes": stats.get("notes"),
                    "chunks": stats.get("chunks"), "indexed_at": _iso(stats.get("updated"))})
    return out


def remove_collection(db_dir: str | Path, name: str, cfg: Config | None = None) -> list[str]:
    """Drop a collection's tables (chunks, documents, caches) and its manifest; the vault is not touched."""
    col = Collection(str(db_dir), name, cfg)
    if name not in collection_names(db_dir, cfg) and not col.has(col.chunks_name):
        known = collection_names(db_dir, cfg)
        raise InputMissing(f"no collection {name!r} in {str(db_dir)!r}; collections: {known}")
    dropped = []
    for n in [col.chunks_name, col.documents_name] + [f"{name}_cache_{c}" for c in CACHE_TABLES]:
        if col.has(n):
            col.drop(n)
            dropped.append(n)
    if col.remove_manifest():
        dropped.append(col.manifest_path.rsplit("/", 1)[-1])
    if file_states.remove(col.db_dir, name, col.storage_cfg):
        dropped.append(file_states.path(col.db_dir, name).rsplit("/", 1)[-1])
    return dropped
