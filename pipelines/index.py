"""Pipeline: vault -> LanceDB (scan_notes -> chunk_notes -> embed_chunks -> write_index), incremental.

A second run over an unchanged vault embeds nothing; changed notes are re-chunked and re-embedded, deleted
notes removed; a change of embedding model, prompt format, chunking or schema re-embeds everything. Notes are
written in groups as they are embedded, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fanout.config import Config
from fanout.db import SCHEMA_VERSION, Collection
from fanout.runner import Runner, model_identity
from pipelines.chunk_notes import chunk_notes
from pipelines.embed_chunks import embed_groups
from pipelines.scan_notes import scan_notes
from pipelines.write_index import (
    add_fts_columns,
    build_fts,
    delete_paths,
    documents_table,
    plan_changes,
    write_index,
)

log = logging.getLogger(__name__)


@dataclass
class IndexSummary:
    notes: int = 0
    chunks: int = 0
    embedded_notes: int = 0
    embedded_chunks: int = 0
    deleted: int = 0
    rebuilt: bool = False
    skipped: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    embed_seconds: float = 0.0

    def text(self) -> str:
        reasons: dict[str, int] = {}
        for s in self.skipped:
            reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
        skip = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none"
        return (f"notes {self.notes} | chunks {self.chunks} | embedded {self.embedded_notes} notes / "
                f"{self.embedded_chunks} chunks | deleted {self.deleted} | rebuilt {self.rebuilt} | "
                f"skipped {len(self.skipped)} ({skip}) | {self.seconds:.1f}s")


def index_manifest(cfg: Config, vault: Path) -> dict:
    """What produced an index: a change in any key except `vault` means everything is re-embedded."""
    name, sha = model_identity(cfg, "embedder")  # the fake backend names itself (configs/fake.yaml)
    return {
        "schema_version": SCHEMA_VERSION,
        "embedder": {"spec": cfg.models.embedder, "file": name, "sha256": sha,
                     "prompt": cfg.models.embed_prompt, "n_ctx": cfg.embedder.n_ctx},
        "chunk": dataclasses.asdict(cfg.chunk),
        "languages": list(cfg.index.languages),
        "vault": str(vault.resolve()),
    }


def index_vault(vault: str | Path, db_dir: str | Path, collection: str, cfg: Config, runner: Runner,
                progress: bool = False) -> IndexSummary:
    """Index (or update) one vault into `db_dir` as `collection`."""
    t0 = time.perf_counter()
    vault = Path(vault)
    notes, skipped = scan_notes(vault, cfg.index.default_lang)
    col = Collection(Path(db_dir), collection)
    manifest = index_manifest(cfg, vault)
    old = col.read_manifest()
    same = {k: v for k, v in old.items() if k not in ("vault", "stats")} == \
           {k: v for k, v in manifest.items() if k != "vault"}
    rebuild = not (same and col.has(col.documents_name) and col.has(col.chunks_name))
    existing = None if rebuild else col.table(col.documents_name).to_arrow().select(["path", "content_hash"])
    changed, deleted, _ = plan_changes(notes, existing)
    summary = IndexSummary(notes=notes.num_rows, rebuilt=rebuild, deleted=len(deleted),
                           skipped=skipped.to_pylist())
    if rebuild:
        col.drop(col.chunks_name)
        col.drop(col.documents_name)
        col.write_manifest(manifest)  # a killed rebuild resumes under the new manifest
    elif deleted:
        for name in (col.chunks_name, col.documents_name):
            delete_paths(col.table(name), deleted)
    todo = notes.filter(pc.is_in(notes["path"], pa.array(sorted(changed), pa.string())))
    acfg = cfg.embedder
    group = max(64, acfg.count * acfg.batch_size * 2)
    chunks_all = chunk_notes(todo, cfg.chunk)
    bar = _bar(progress, chunks_all.num_rows)
    te = time.perf_counter()
    wrote_any = False
    paths = todo["path"].to_pylist()
    per_note: dict[str, int] = {}
    for p in chunks_all["path"].to_pylist():
        per_note[p] = per_note.get(p, 0) + 1
    i = 0
    groups = []
    while i < len(paths):  # groups of whole notes, about `group` chunks each
        sel: list[str] = []
        n = 0
        while i < len(paths) and (not sel or n < group):
            sel.append(paths[i])
            n += per_note.get(paths[i], 0)
            i += 1
        groups.append((sel, chunks_all.filter(pc.is_in(chunks_all["path"], pa.array(sel, pa.string())))))
    # in-process: one embedder call per group; Ray (runner.engine data): one Dataset, groups back in order
    for sel, part in embed_groups(groups, runner, cfg):
        part_notes = todo.filter(pc.is_in(todo["path"], pa.array(sel, pa.string())))
        embedded = add_fts_columns(part, part_notes, cfg.index.languages)
        write_index(col, embedded, documents_table(part_notes, part), set(sel))
        wrote_any = True
        summary.embedded_chunks += part.num_rows
        if bar is not None:
            bar.update(part.num_rows)
    if bar is not None:
        bar.close()
    summary.embed_seconds = time.perf_counter() - te
    summary.embedded_notes = len(paths)
    if (wrote_any or deleted or rebuild) and col.has(col.chunks_name):
        build_fts(col, cfg.index.languages)
    summary.chunks = col.table(col.chunks_name).count_rows() if col.has(col.chunks_name) else 0
    summary.seconds = time.perf_counter() - t0
    manifest["stats"] = {"notes": summary.notes, "chunks": summary.chunks, "updated": time.time()}
    col.write_manifest(manifest)
    return summary


def _bar(progress: bool, total: int):
    if not progress or total == 0:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="chunk", desc="embedding", leave=False)
