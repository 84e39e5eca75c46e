"""An index run's upkeep of its tables once its rows are written (pipelines/index.py calls both): merging the small
fragments rounds leave, and deciding whether Lance's full-text indexes are rebuilt or left to age.
"""

from __future__ import annotations

import logging

from fanout.pipelines.write_index import build_fts

from fanout.config import Config
from fanout.store import storage
from fanout.store.db import Collection

log = logging.getLogger(__name__)


COMPACT_KEEP_ROWS = 4096  # a fragment this large is never merged by a round's compaction (`compact`)


def compact(col: Collection, cfg: Config) -> bool:
    """Merge the small fragments each write leaves (a first index writes one per group of notes, a round one more,
    plus deletion files) once a table has more than `index.compact_fragments`: a round's reads cost per fragment.
    Compaction renumbers the rows, so the next postings and vectors files are built from every row once, and it
    folds the deletion files in, after which an older full-text index no longer shows its age (fts_index_meta
    `updated_since`): the caller rebuilds it. Returns whether the chunks table was compacted."""
    done = False
    for name in (col.chunks_name, col.documents_name):
        if not col.has(name):
            continue
        ds = col.open_version(name)
        frags = ds.get_fragments()
        if len(frags) <= cfg.index.compact_fragments:
            continue
        # fragments of many rows (a first index's) are left as they are: their rows keep their ids, so the next
        # postings and vectors files still start from the previous version's; only the rounds' small fragments
        # are merged (their rows renumbered: read again, a few hundred rows)
        big = [f.fragment_id for f in frags if f.physical_rows >= COMPACT_KEEP_ROWS]
        if len(frags) - len(big) < 2:
            continue
        with col.writing(name):
            got = ds.optimize.compact_files(materialize_deletions=True, excluded_fragment_ids=big)
        col.forget(name)
        done = done or name == col.chunks_name
        log.info("compacted %s: %s", name, got)
    return done


def lance_fts(col: Collection, cfg: Config, old: dict, chunks: int, anew: bool, added: int) -> dict:
    """Lance's full-text indexes after a run that changed rows: rebuilt when the rows added or deleted since their
    last build pass `index.fts_rebuild_share` of the table (or on a rebuild, or with no record of a build), else
    left as they are: Lance searches the rows added since without the index, and the memory engine scores every
    pinned row exactly whatever the index's age (fanout/store/fts_memory.py). Always rebuilt when searches are
    answered by Lance (`retrieve.fts_engine` not `memory`, no postings files). Returns the manifest's `fts`."""
    before = int((old.get("stats") or {}).get("chunks") or 0)
    removed = max(0, before + added - chunks)
    rec = old.get("fts") if isinstance(old.get("fts"), dict) and not anew else None
    stale = (int(rec.get("stale_rows", 0)) if rec else 0) + added + removed
    # searches that Lance answers (another engine, or no postings file to load: an object store) want it fresh
    memory = cfg.retrieve.fts_engine == "memory" and cfg.retrieve.fts_postings_file and not storage.is_remote(col.db_dir)
    if rec is None or not memory or stale > cfg.index.fts_rebuild_share * max(1, chunks):
        build_fts(col, cfg.index.languages)
        return {"built_rows": chunks, "stale_rows": 0}
    return {"built_rows": rec.get("built_rows"), "stale_rows": stale}
