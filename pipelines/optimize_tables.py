"""Stage: compact a collection's Lance tables (chunks, documents, caches) without breaking readers.

Every incremental `fanout index` and every cache upsert adds small fragments and a new table version.
`tbl.optimize()` merges the fragments, folds rows added since the last index build into the full-text and
vector indexes, and deletes the files of versions older than `keep_days`.

Readers are safe because Lance tables are versioned: compaction writes new files as a new version, and a
reader that opened an older version keeps reading that version's files until they are cleaned up, which
happens only after `keep_days`. Keep `keep_days` longer than any reader holds one table handle open
(a long-running `fanout mcp` server, say); `keep_days=0` deletes every old version at once and breaks any
reader still on one. Run it after `fanout index`, not at the same time: two writers on one table can conflict.

It also keeps the indexes in shape: a BTREE on every cache table's `key` (lookups and `merge_insert`), the
chunks table's vector index built once it passes `index.vector_index_min_rows` and `index.exact_search_rows` (or
re-trained when the table has doubled since), recorded in the collection's manifest.
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fanout.pipelines.query_files import write_query_files
from fanout.pipelines.write_index import build_fts, vector_index_reason

from fanout.config import Config, load_config
from fanout.errors import InputMissing, UserError
from fanout.store.db import Collection, check_collection_name
from fanout.store.locks import collection_lock
from fanout.store.vectors import build_vector_index, ensure_scalar_index

if TYPE_CHECKING:
    from lancedb.table import Table

log = logging.getLogger(__name__)


def collection_tables(col: Collection) -> list[str]:
    """The collection's tables that exist: chunks, documents, then its caches (`<name>_cache_*`), sorted."""
    names = col.table_names()
    own = [n for n in (col.chunks_name, col.documents_name) if n in names]
    return own + sorted(n for n in names if n.startswith(f"{col.name}_cache_"))


def _shape(tbl: Any) -> dict[str, int]:  # Any: lancedb types stats() as a dataclass, it returns a dict
    st = tbl.stats()
    return {"rows": int(st["num_rows"]), "fragments": int(st["fragment_stats"]["num_fragments"]),
            "bytes": int(st["total_bytes"]), "versions": len(tbl.list_versions())}


def _maybe_vector_index(col: Collection, name: str, cfg: Config) -> str:
    """Build the vector index of a collection's chunks table when it needs one; '' or what was built."""
    owner = Collection(col.db_dir, name.removesuffix("_chunks"), cfg)
    manifest = owner.read_manifest()
    if not manifest:  # not a fanout collection (or no manifest yet): leave its indexes alone
        return ""
    tbl = owner.table(name)
    reason = vector_index_reason(tbl, cfg.index, manifest.get("vector_index"))
    if not reason:
        return ""
    log.info("building the vector index of %s: %s", name, reason)
    manifest["vector_index"] = build_vector_index(tbl, cfg.index)
    owner.write_manifest(manifest)
    return manifest["vector_index"]["index_type"]


def optimize_tables(db_dir: str | Path, collection: str | None = None, keep_days: float = 7.0,
                    cfg: Config | None = None) -> list[dict]:
    """Compact and clean up the tables of `collection` (every table of the db when None).

    Returns one row per table: its name, rows, fragments / versions / bytes before and after, and the
    index built (if any). `cfg` (default: the active profile) gives index settings and storage options.
    """
    if keep_days < 0:
        raise UserError(f"keep_days must be >= 0, got {keep_days}; 7 keeps a week of old versions for readers")
    cfg = cfg or load_config()
    col = Collection(str(db_dir), collection or "", cfg)
    if collection:
        names = collection_tables(col)
        if not names:
            raise InputMissing(
                f"no tables of collection {collection!r} in {str(db_dir)!r}; tables there: {col.table_names()}")
    else:
        names = sorted(col.table_names())
    with contextlib.ExitStack() as locks:  # never beside a running `fanout index` of these collections
        for prefix in sorted({n.rsplit("_", 1)[0] for n in names if n.endswith(("_chunks", "_documents"))}):
            with contextlib.suppress(ValueError):  # a table name fanout gives no collection: no lock
                check_collection_name(prefix)
                locks.enter_context(collection_lock(db_dir, prefix, "fanout optimize"))
        return _optimize(col, db_dir, names, keep_days, cfg)


def _optimize(col: Collection, db_dir: str | Path, names: list[str], keep_days: float, cfg: Config) -> list[dict]:
    out = []
    versions: dict[str, int] = {}
    pins = pinned_versions(db_dir, names, cfg)
    for name in names:
        tbl = col.table(name)
        versions[name] = int(tbl.version)
        before = _shape(tbl)
        t = time.perf_counter()
        built = ""
        if "_cache_" in name and "key" in tbl.schema.names and ensure_scalar_index(tbl, "key"):
            built = "BTREE(key)"
        keep = retention(tbl, keep_days, pins.get(name))
        # also folds new rows into every index; keep_days 0 also deletes files no version references (left
        # by a write that failed or was killed; never run it during `fanout index`)
        tbl.optimize(cleanup_older_than=keep, delete_unverified=keep_days == 0)
        if name.endswith("_chunks") and "vector" in tbl.schema.names:
            built = _maybe_vector_index(col, name, cfg) or built
        after = _shape(tbl)
        row = {"table": name, "rows": after["rows"], "seconds": round(time.perf_counter() - t, 3),
               "index_built": built}
        for k in ("fragments", "versions", "bytes"):
            row[f"{k}_before"], row[f"{k}_after"] = before[k], after[k]
        log.info("optimized %s: %s", name, row)
        out.append(row)
    for prefix in sorted({n.rsplit("_", 1)[0] for n in names if n.endswith(("_chunks", "_documents"))}):
        owner = Collection(str(db_dir), prefix, cfg)
        m = owner.read_manifest()
        fts = m.get("fts")
        if f"{prefix}_chunks" in names and isinstance(fts, dict) and fts.get("stale_rows"):
            # Lance's optimize folded rows into a full-text index older than them (its N and avgdl still
            # count the deleted rows) and compaction hid its age: built anew on the rows (pipelines/index.py)
            build_fts(owner, cfg.index.languages)
            owner.write_manifest({**m, "fts": {"built_rows": owner.table(owner.chunks_name).count_rows(),
                                               "stale_rows": 0}})
        owner.advance_pins(versions)  # readers move to the compacted versions
        if f"{prefix}_chunks" in names:  # compaction renumbers rows: the postings of the pinned version, the
            write_query_files(db_dir, prefix, cfg)  # older versions' files removed
    return out


def pinned_versions(db_dir: str | Path, names: list[str], cfg: Config) -> dict[str, int]:
    """table -> the version its collection's manifest pins (what readers are served), for chunks/documents."""
    out: dict[str, int] = {}
    for prefix in sorted({n.rsplit("_", 1)[0] for n in names if n.endswith(("_chunks", "_documents"))}):
        try:
            tables = Collection(str(db_dir), prefix, cfg).read_manifest().get("tables")
        except ValueError:  # not a name fanout gives a collection: no manifest of ours
            continue
        if isinstance(tables, dict):
            out.update({k: v for k, v in tables.items() if isinstance(v, int) and k in names})
    return out


def retention(tbl: Table, keep_days: float, pinned: int | None) -> timedelta:
    """How old a version must be to be deleted: `keep_days`, but never so little that the version the
    manifest pins goes (after a run that stopped part-way the pinned version is older than the latest, and
    readers are served it until the next `fanout index` completes)."""
    keep = timedelta(days=keep_days)
    if pinned is None or pinned >= int(tbl.version):
        return keep
    stamp = next((v["timestamp"] for v in tbl.list_versions() if int(v["version"]) == pinned), None)
    if stamp is None:
        return keep
    now = datetime.now(stamp.tzinfo) if stamp.tzinfo else datetime.now()
    age = now - stamp + timedelta(minutes=1)  # a margin for the time optimize takes
    if age > keep:
        log.info("keeping versions of %s from v%d on: the index manifest pins v%d (an index run did not "
                 "finish; the next `fanout index` moves it)", tbl.name, pinned, pinned)
    return max(keep, age)


def optimize_text(rows: list[dict]) -> str:
    """One line per table: `name: rows, fragments a -> b, versions a -> b, MB a -> b, seconds`."""
    if not rows:
        return "no tables"
    return "\n".join(
        f"{r['table']}: {r['rows']} rows, fragments {r['fragments_before']} -> {r['fragments_after']}, "
        f"versions {r['versions_before']} -> {r['versions_after']}, "
        f"{r['bytes_before'] / 2**20:.1f} -> {r['bytes_after'] / 2**20:.1f} MB, {r['seconds']:.1f}s"
        + (f", built {r['index_built']}" if r.get("index_built") else "")
        for r in rows)
