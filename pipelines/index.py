"""Pipeline: vault -> LanceDB (scan_notes -> chunk_notes -> embed_chunks -> write_index), incremental.

A second run over an unchanged vault embeds nothing; changed notes are re-chunked and re-embedded, deleted
notes removed; a change of embedding model, prompt format, chunking or schema re-embeds everything. Notes are
written in groups as they are embedded, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from fanout.pipelines.check_vectors import check_vectors, embed_reusing, note_groups, old_vectors
from fanout.pipelines.chunk_notes import CHUNKER_VERSION, chunk_notes
from fanout.pipelines.embed_chunks import embed_groups
from fanout.pipelines.query_files import write_query_files
from fanout.pipelines.scan_notes import IGNORED, VaultScan, scan_key, scan_vault
from fanout.pipelines.table_upkeep import compact, lance_fts
from fanout.pipelines.write_index import (
    add_filter_columns,
    add_fts_columns,
    build_indexes,
    delete_notes,
    documents_table,
    has_paths,
    plan_changes,
    plan_touched,
    vector_index_reason,
    write_index,
)

from fanout.config import Config
from fanout.exec.progress import Progress
from fanout.exec.runner import Runner
from fanout.filters import FILTER_COLUMNS
from fanout.io.vault import RULE_FILES, resolve_vault, vault_paths
from fanout.models.identity import model_identity
from fanout.store import file_states, process_memory, stamps, storage
from fanout.store.db import SCHEMA_VERSION, Collection, check_collection_name
from fanout.store.integrity import IndexStateError
from fanout.store.locks import collection_lock
from fanout.store.vectors import fit_vectors, has_vector_index, rederive_vectors, vector_dims
from fanout.text import nfc

log = logging.getLogger(__name__)


@dataclass
class IndexReport:
    """What an index run did: notes and chunks now indexed, what it embedded, reused, deleted and skipped
    (`skipped`: one dict per note with its `path`, `reason` and `detail`), and how long it took."""

    notes: int = 0
    chunks: int = 0
    embedded_notes: int = 0
    embedded_chunks: int = 0
    deleted: int = 0
    rebuilt: bool = False
    reused_chunks: int = 0  # chunks whose vector was reused from the old index (identical embed_text)
    repaired: int = 0  # notes re-embedded because a stored vector was damaged
    read_notes: int = 0  # note files read and hashed (the others' stat was the recorded one: not read)
    skipped: list[dict] = field(default_factory=list)
    ignored: int = 0  # paths excluded by .fanoutignore / Obsidian's excluded files
    seconds: float = 0.0
    embed_seconds: float = 0.0
    vector_index: str = "none"  # "none" (brute force), "built <type>" or "kept <type>"
    rederived: str = ""  # "768 -> 256" when the Matryoshka size changed (no re-embedding)

    def text(self) -> str:
        reasons: dict[str, int] = {}
        for s in self.skipped:
            reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
        skip = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none"
        extra = (f" | reused {self.reused_chunks} vectors" if self.reused_chunks else "") + \
                (f" | repaired {self.repaired} notes" if self.repaired else "") + \
                (f" | ignored {self.ignored}" if self.ignored else "")
        return (f"notes {self.notes} | chunks {self.chunks} | embedded {self.embedded_notes} notes / "
                f"{self.embedded_chunks} chunks | deleted {self.deleted} | rebuilt {self.rebuilt}{extra} | "
                f"skipped {len(self.skipped)} ({skip}) | vector index {self.vector_index}"
                + (f" | vectors re-derived {self.rederived}" if self.rederived else "")
                + f" | {self.seconds:.1f}s")


# manifest keys that change without re-embedding: where the vault was, run stats, how vectors are searched,
# the table versions readers pin, the in-progress flag of a rebuild, the notes' content hash (index_stamp), and
# the age of Lance's full-text indexes (`fts`: rows added or deleted since their build)
DERIVED_KEYS = ("vault", "stats", "vectors", "vector_index", "scalar_indexes", "tables", "building", "content", "fts")


def index_manifest(cfg: Config, vault: Path) -> dict:
    """What produced an index: a change in any key except DERIVED_KEYS means everything is re-embedded."""
    name, sha = model_identity(cfg, "embedder")  # the fake backend names itself (configs/fake.yaml)
    return {
        "schema_version": SCHEMA_VERSION,
        "embedder": {"spec": cfg.models.embedder, "file": name, "sha256": sha,
                     "prompt": cfg.models.embed_prompt, "n_ctx": cfg.embedder.n_ctx},
        "chunk": {**dataclasses.asdict(cfg.chunk), "version": CHUNKER_VERSION},
        "languages": list(cfg.index.languages),
        "filter_columns": list(FILTER_COLUMNS),  # an index without them is rebuilt once (vectors reused)
        "vault": str(vault.resolve()),
    }


def _old_manifest(col: Collection) -> dict:
    """The stored manifest, or {} when missing; a damaged one is logged and means a rebuild."""
    try:
        return col.stored_manifest() or {}
    except IndexStateError as e:
        log.warning("%s; rebuilding the index", e)
        return {}


def index_vault(vault: str | Path, db_dir: str | Path, collection: str, cfg: Config, runner: Runner,
                progress: bool | Callable[[int, int], None] = False, rebuild: bool = False,
                full_check: bool = False, paths: Iterable[str | os.PathLike] | None = None) -> IndexReport:
    """Index (or update) one vault into `db_dir` as `collection`; `rebuild` starts from empty tables.

    `paths` (notes or folders, relative to the vault or absolute inside it: a watch round's events): only those
    are listed, stat'ed and read; every other note keeps what the last run recorded of it (`scan_vault`). The
    whole vault is walked instead when there is no record (first run, `rebuild`, `full_check`), when a path is
    an ignore-rule file or the vault itself, or when the record names a note the index lacks. A path outside the
    vault is refused (UserError).

    Only notes whose stat (size, mtime_ns, inode, ctime_ns) differs from the one recorded at the last run are read
    (fanout/store/file_states.py); `full_check` reads and hashes every note and reads every stored vector instead,
    as a run does by itself when there is no record or the scan settings changed (docs/architecture.md).

    `progress`: True draws a tqdm bar; a callable is called as `progress(chunks_done, chunks_total)` after
    each written group of notes (fanout/exec/progress.py's reporter: a bar on a TTY, one-line updates off it).

    A full disk (or quota) raises `storage.DiskFull`: one line naming the index location and the fix. Each
    table write that failed has removed its files (Collection.writing), the manifest still pins the last
    completed versions (searches are unaffected), and the same command resumes once there is space.

    One run per collection at a time (fanout/store/locks.py): a second run raises CollectionBusy, one line naming
    the run that holds it, before it reads or writes anything of the index.
    """
    resolve_vault(vault)  # a bad vault or name is refused before the lock file is made in the db folder
    check_collection_name(collection)
    only = None if paths is None else vault_paths(vault, paths)
    try:
        with collection_lock(db_dir, collection, f"fanout index {vault} -c {collection}"):
            return _index_vault(vault, db_dir, collection, cfg, runner, progress, rebuild, full_check, only)
    except Exception as e:
        if isinstance(e, storage.DiskFull) or not storage.is_disk_full(e):
            raise
        db = storage.normalize_uri(db_dir)
        coll = "" if collection == "notes" else f" -c {collection}"
        raise storage.DiskFull(
            f"no space left on the device that holds the index {db}{storage.free_text(db)}; the run stopped "
            f"and removed what it had not committed (searches keep the last completed index): free space there "
            f"(or give --db on another disk) and run `fanout index {vault} --db {db}{coll}` again") from None


def _index_vault(vault: str | Path, db_dir: str | Path, collection: str, cfg: Config, runner: Runner,
                 progress: bool | Callable[[int, int], None] = False, rebuild: bool = False,
                 full_check: bool = False, only: set[str] | None = None) -> IndexReport:
    t0 = time.perf_counter()
    process_memory.limit_malloc_arenas(cfg.index.malloc_arenas)  # before Lance's threads start writing
    if only is not None and any(p in RULE_FILES or p != nfc(p) for p in only):
        only = None  # the ignore rules changed (which notes are indexed), or a name to check against all: walk all
    vault = resolve_vault(vault)
    col = Collection(str(db_dir), collection, cfg)
    col.vault_hint = str(vault)
    manifest = index_manifest(cfg, vault)
    old = _old_manifest(col)
    same = {k: v for k, v in old.items() if k not in DERIVED_KEYS} == \
           {k: v for k, v in manifest.items() if k not in DERIVED_KEYS}
    rebuild = rebuild or not (same and col.has(col.documents_name) and col.has(col.chunks_name))
    damaged: list[str] = []
    if not rebuild and full_check and cfg.index.verify:  # unreadable tables raise (fix: --rebuild); damaged
        _, damaged = col.verify()  # vectors re-embed (an ordinary run checks the rows it writes)
        for p in damaged:
            log.warning("%s: a stored vector is damaged; re-embedding the note", p)
    rederived = ""
    if not rebuild:  # a new Matryoshka size is cut from the stored full vectors, not re-embedded
        old_dim, full_dim = vector_dims(col.open_version(col.chunks_name))  # (Lance's schema: no lancedb import)
        if (cfg.index.vector_dim or full_dim) != old_dim:
            with col.writing(col.chunks_name):
                a, b = rederive_vectors(col.db, col.table(col.chunks_name), cfg.index.vector_dim)
                col.forget(col.chunks_name)
            rederived = f"{a} -> {b}" if a != b else ""
    # the stat fast path: only notes whose stat changed since the recorded run are read (a full check reads all)
    key = scan_key(vault, cfg.index.default_lang, cfg.index.max_note_mb, cfg.index)
    record = None if rebuild or full_check else file_states.load(db_dir, collection, key, col.storage_cfg)
    agreed = None if record is None else record.total  # (the scan takes the record's dicts over)
    scan = scan_vault(vault, cfg.index.default_lang, cfg.index.max_note_mb, cfg.index, known=record,
                      racy_s=cfg.index.stat_racy_s, paths=only)
    # a watch round whose record holds what the pinned index holds (the content sums agree) compares only the
    # paths it listed: O(changed); any doubt (a killed round, a failed note, an older index) compares all
    quick = agreed is not None and scan.touched is not None and not (rederived or damaged) and \
        stamps.content_value(old.get("content")) == agreed and _at_manifest(col, old)
    existing = None
    if quick:
        changed, deleted = plan_touched(scan.touched or set(), scan.hashes, scan.before)
    elif not (rebuild or rederived or damaged) and scan.read_count == 0 and \
            stamps.same_content(old.get("content"), scan.hashes.items()) and _current(col, old, cfg):
        # the pinned index holds exactly these notes with these hashes (the manifest's `content`): nothing to do,
        # nothing to read
        _save_states(db_dir, collection, key, scan, col)
        return _unchanged(summary_of(scan, rederived, damaged), old, t0)
    if not (rebuild or quick):
        with col.guard(col.documents_name):  # (Lance directly: lancedb's query iterates ~20x slower here)
            existing = col.open_version(col.documents_name).to_table(columns=["path", "content_hash"])
    for _ in range(0 if quick else 3):  # a note the record trusted but the index lacks (or holds another hash
        changed, deleted, _ = plan_changes(scan.hashes, existing)  # of) is read now
        changed |= set(damaged) & set(scan.hashes)
        if not changed - set(scan.rows):
            break
        if scan.partial and changed - set(scan.rows) - set(scan.files):  # not listed: the whole walk lists it
            scan = scan_vault(vault, cfg.index.default_lang, cfg.index.max_note_mb, cfg.index, known=record,
                              racy_s=cfg.index.stat_racy_s)
            continue
        scan.read(changed - set(scan.rows))
    changed &= set(scan.rows)
    summary = summary_of(scan, rederived, damaged)
    summary.rebuilt, summary.deleted = rebuild, len(deleted)
    if not (rebuild or rederived or changed or deleted) and _current(col, old, cfg):
        # nothing to write: the manifest already pins what the notes give (a killed round's tables would not be)
        _save_states(db_dir, collection, key, scan, col)
        return _unchanged(summary, old, t0)
    notes = scan.notes
    scan.rows.clear()  # (the table holds them now: the bodies once, not twice)
    reuse: dict[str, list[float]] = {}
    if rebuild:
        if old.get("embedder") == manifest["embedder"] and old.get("schema_version") == SCHEMA_VERSION:
            reuse = old_vectors(col)  # a chunking change: identical texts keep their vectors
        col.drop(col.chunks_name)
        col.drop(col.documents_name)
        col.write_manifest({**manifest, "building": True})  # a killed rebuild resumes under the new manifest
    # notes with a documents row (quick: those the record holds, as the index does)
    known = {p for p in changed | deleted if scan.before.get(p) is not None} if quick else \
        set() if existing is None else set(existing["path"].to_pylist())
    if not rebuild:
        # chunks of notes without a documents row (a run killed between a group's two writes) go in one delete,
        # so each group deletes only the rows of notes it replaces (a first index or a rebuild deletes nothing)
        orphans = changed - known
        # (quick: the tables are the manifest's versions, which a killed round's orphans never are)
        gone = deleted | (orphans if orphans and not quick and has_paths(col, orphans) else set())
        if gone:
            for name in (col.chunks_name, col.documents_name):
                delete_notes(col, name, gone)
    todo = notes if len(changed) == notes.num_rows else \
        notes.filter(pc.is_in(notes["path"], pa.array(sorted(changed), pa.string())))  # (changed: notes' paths)
    del notes
    acfg = cfg.embedder
    group = max(64, acfg.count * acfg.batch_size * 2)
    count = None
    # a served embedder's tokenizer is on its server (remote.tokenize): None there keeps the estimated budget
    if cfg.chunk.check_context and todo.num_rows:
        from fanout.actors.tokenizer import shared_counter

        count = shared_counter(cfg)  # loaded once per process: a watcher's rounds reuse it
    chunks_all = chunk_notes(todo, cfg.chunk, count, cfg.embedder.n_ctx)
    # True: the house reporter (a bar on a TTY, one line every few seconds off it); a callable: the caller's own
    bar = Progress("embedding", "chunk") if progress is True and chunks_all.num_rows else None
    report = progress if callable(progress) else bar
    if report is not None:
        report(0, chunks_all.num_rows)
    te = time.perf_counter()
    wrote_any, written_rows, paths = False, 0, todo["path"].to_pylist()
    failed: list[dict] = []
    written: set[str] = set()
    pending: list[tuple[pa.Table, pa.Table, set[str]]] = []  # embedded groups not written yet
    flushed = time.perf_counter()
    groups = note_groups(paths, chunks_all, group, reuse)
    # one run (embed_groups): in-process one embedder call per group; on Ray one Dataset, groups back in order;
    # chunks whose embedded text is unchanged since the last index keep their vectors (never re-embedded)
    for (sel, part, first), fresh in embed_groups(groups, runner, cfg):
        vectors, reused = embed_reusing(part, None, reuse, fresh)
        vectors, bad = check_vectors(vectors)  # a note with a NaN/inf/zero vector is not written at all
        failed += bad
        ok = [p for p in sel if p not in {b["path"] for b in bad}]
        part_notes = todo.slice(first, len(sel)) if len(ok) == len(sel) else \
            todo.filter(pc.is_in(todo["path"], pa.array(ok, pa.string())))  # (the group's notes are todo's next)
        if ok:
            embedded = add_filter_columns(add_fts_columns(vectors, part_notes, cfg.index.languages), part_notes)
            embedded = fit_vectors(embedded, cfg.index.vector_dim)
            pending.append((embedded, documents_table(part_notes, embedded), set(sel) & known))
            wrote_any = True
            written_rows += embedded.num_rows
            written.update(ok)
            if time.perf_counter() - flushed >= cfg.index.write_every_s or \
                    0 < cfg.index.write_every_mb <= sum(a.nbytes + b.nbytes for a, b, _ in pending) / 2**20:
                flushed = _flush(col, pending)
        else:  # every note of the group failed: only remove their old rows
            for name in (col.chunks_name, col.documents_name):
                if col.has(name):
                    delete_notes(col, name, set(sel))
        summary.embedded_chunks += part.num_rows - reused
        summary.reused_chunks += reused
        if report is not None:
            report(summary.embedded_chunks, chunks_all.num_rows)
    _flush(col, pending)
    del chunks_all, groups, todo  # written: what Lance's index builds below need is in the tables
    process_memory.release_memory()
    if bar is not None:
        bar.close()
    if written and cfg.index.verify:  # the rows written read back (a full check reads every row first)
        _, bad_rows = col.verify(paths=None if rebuild else written)  # (a rebuild wrote every row: one scan)
        if bad_rows:
            for name in (col.chunks_name, col.documents_name):
                delete_notes(col, name, set(bad_rows))
            failed += [{"path": p, "reason": "embedding_failed", "detail": "a vector read back damaged after "
                        "the write; the note was removed and is retried on the next run"} for p in bad_rows]
    summary.skipped += failed
    summary.embed_seconds = time.perf_counter() - te
    summary.embedded_notes = len(paths) - len(failed)
    compacted = compact(col, cfg) if wrote_any or deleted else False
    summary.chunks = col.table(col.chunks_name).count_rows() if col.has(col.chunks_name) else 0
    if (wrote_any or deleted or rebuild or rederived) and col.has(col.chunks_name):
        manifest["fts"] = lance_fts(col, cfg, old, summary.chunks, rebuild or bool(rederived) or compacted,
                                    written_rows)
    elif old.get("fts"):
        manifest["fts"] = old["fts"]
    process_memory.release_memory()  # (what Lance's full-text index builds left)
    if col.has(col.chunks_name):
        manifest.update(build_indexes(col, cfg, old if not (rebuild or rederived) else {}))
        vi = manifest.get("vector_index")
        summary.vector_index = "none" if not vi else \
            f"{'built' if vi.get('built') != (old.get('vector_index') or {}).get('built') else 'kept'} " \
            f"{vi['index_type']}"
    summary.seconds = time.perf_counter() - t0
    manifest["stats"] = {"notes": summary.notes, "chunks": summary.chunks, "updated": time.time()}
    # what answers depend on (index_stamp), not the table versions: the documents table holds every note scanned
    # except those that failed now (content_key reads it back)
    gone = {f["path"] for f in failed}
    if quick and agreed is not None:  # the pinned index's sum, less the rows this round replaced or removed, plus those it wrote
        total = agreed - stamps.content_sum((p, h) for p in changed | deleted if (h := scan.before.get(p)) is not None)
        manifest["content"] = stamps.content_text(total + stamps.content_sum((p, scan.hashes[p]) for p in changed - gone))
    else:
        manifest["content"] = stamps.content_digest((p, h) for p, h in scan.hashes.items() if p not in gone)
    manifest["tables"] = col.table_versions()  # readers check out exactly these versions (Collection.refresh)
    if col.has(col.chunks_name):  # before the versions are published: their first search maps them
        # a round's files are made after it returns (a rebuild's before: every process would build its own)
        write_query_files(db_dir, collection, cfg, manifest["tables"], background=True,
                       later=not (rebuild or rederived))
    col.write_manifest(manifest)
    _save_states(db_dir, collection, key, scan, col, always=True)  # after the commit it records
    return summary


def _flush(col: Collection, pending: list[tuple[pa.Table, pa.Table, set[str]]]) -> float:
    """Write the embedded groups in `pending` as one write per table (write_index), and empty it; returns the
    time. Every write is a table version and a fragment: a first index with a fast embedder wrote ~900 of
    each at 20,000 notes, one per group."""
    if pending:
        write_index(col, pa.concat_tables([p[0] for p in pending]), pa.concat_tables([p[1] for p in pending]),
                    set().union(*(p[2] for p in pending)))
        pending.clear()
    return time.perf_counter()


def summary_of(scan: VaultScan, rederived: str, damaged: list[str]) -> IndexReport:
    """The report's counts of a scan (notes, skipped, ignored, read)."""
    skipped = scan.skipped
    is_ignored = pc.equal(skipped["reason"], IGNORED)
    ignored, skipped = skipped.filter(is_ignored), skipped.filter(pc.invert(is_ignored))
    return IndexReport(notes=len(scan.hashes), skipped=skipped.to_pylist(), ignored=ignored.num_rows,
                       repaired=len(damaged), rederived=rederived, read_notes=scan.read_count)


def _unchanged(summary: IndexReport, old: dict, t0: float) -> IndexReport:
    """The report of a run that wrote nothing: the counts of the index the manifest `old` pins."""
    summary.chunks = int((old.get("stats") or {}).get("chunks") or 0)
    vi = old.get("vector_index")
    summary.vector_index = f"kept {vi['index_type']}" if vi else "none"
    summary.seconds = time.perf_counter() - t0
    return summary


def _save_states(db_dir: str | Path, collection: str, key: str, scan: VaultScan, col: Collection,
                 always: bool = False) -> None:
    """Record the scan's file states (a partial scan's: its `touched` rows), or hand the record back unchanged."""
    if not (always or scan.changed_states or scan.touched is not None):
        return file_states.keep(db_dir, collection)
    file_states.save(db_dir, collection, key, scan.states, col.storage_cfg, changed=scan.touched)


def _at_manifest(col: Collection, old: dict) -> bool:
    """Whether the manifest `old` pins the latest table versions of a finished run."""
    return not old.get("building") and isinstance(old.get("tables"), dict) and old["tables"] == col.table_versions()


def _current(col: Collection, old: dict, cfg: Config) -> bool:
    """Whether the manifest `old` pins the latest table versions of a finished run (no rebuild in progress, no
    vector index due): then a run that changes no note has nothing to do."""
    if not _at_manifest(col, old):
        return False
    chunks = col.open_version(col.chunks_name)  # (Lance itself: an unchanged run never imports lancedb)
    vi = old.get("vector_index") if has_vector_index(chunks) else None
    return vector_index_reason(chunks, cfg.index, vi) is None
