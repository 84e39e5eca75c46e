"""The files searching processes map instead of each building its own copy of a chunks version: the memory
full-text engine's postings (fanout/store/fts_postings.py) and exact search's vectors (fanout/store/vectors_file.py),
made by `fanout index` (pipelines/index.py: an index round's after it returns) and `fanout optimize`."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path

from fanout.config import Config
from fanout.store import exact_vectors, fts_postings, storage, vectors_file, version_files
from fanout.store.db import Collection, fts_columns

log = logging.getLogger(__name__)


def write_query_files(db_dir: str | Path, collection: str, cfg: Config, versions: dict[str, int] | None = None,
                   background: bool = False, later: bool = False) -> dict[str, str]:
    """The files searching processes map instead of each building its own copy, for the version the manifest
    now pins, or `versions` (an index run: the versions it is about to publish) (kept when already there): the
    memory full-text engine's postings (fanout/store/fts_postings.py, `retrieve.fts_postings_file`) and exact
    search's vectors (fanout/store/vectors_file.py, `index.exact_vectors_file`; `background`: the vectors file
    written by a thread after this returns, exact_vectors.ensure_file). `later` (an index round): both made and
    written by jobs that run after this returns, one at a time per table and kind
    (fanout/store/version_files.py `later`): the round never waits for them; this process's searches of the new
    version wait for its postings (the updated columns themselves, not read back: fts_postings.load_or_update)
    and bring their vectors copy up to date as without the file; another process that opens the version before
    its files are there brings its own copies from the previous version's files (only the rows added are read).
    Local databases only; never fails the run (a warning: processes then build or load their own, as without
    the files). Returns what was done per file (`later` for a background job)."""
    if storage.is_remote(db_dir):
        return {}
    done: dict[str, str] = {}
    try:
        reader = Collection(str(db_dir), collection, cfg)
        if not reader.has(reader.chunks_name):  # (`fanout optimize` over tables fanout did not make)
            return done
        if versions is None and not reader.exists():
            return done
        if versions is not None:
            reader.pin(versions)
        else:
            reader.refresh()
        ds = reader.dataset(reader.chunks_name)
        jobs: list[tuple[str, Callable[[], dict[str, str]]]] = []
        share = cfg.index.query_files_share if later else 0.0  # (`fanout optimize`: written whatever the share)
        if cfg.retrieve.fts_engine == "memory" and cfg.retrieve.fts_postings_file:
            columns = fts_columns(cfg.index.languages)
            jobs.append((fts_postings.job_key(ds), lambda: fts_postings.ensure(ds, columns,
                                                                               cfg.retrieve.rowid_map_rows, share)))
        if exact_vectors.file_wanted(ds, cfg):
            jobs.append((vectors_file.job_key(ds),
                         lambda: {"vector": exact_vectors.ensure_file(ds, background=background, share=share)}))
        for key, job in jobs:
            if later:
                version_files.later(key, functools.partial(_query_files, collection, job), "fanout-query-files")
                done[key.rsplit("#", 1)[-1]] = "later"
            else:
                done.update(_query_files(collection, job))
    except Exception as e:  # noqa: BLE001  the index is complete; the files only save each process a build
        log.warning("query files of %s not written (%s); each process builds its own copy", collection, e)
    return done


def _query_files(collection: str, job: Callable[[], dict[str, str]]) -> dict[str, str]:
    """`job`'s files written (write_query_files): what it did; never raises (a warning)."""
    t = time.process_time()
    try:
        done = job()
    except Exception as e:  # noqa: BLE001  the index is complete; the files only save each process a build
        log.warning("query files of %s not written (%s); each process builds its own copy", collection, e)
        return {}
    log.info("query files of %s (%.1f CPU-s): %s", collection, time.process_time() - t, done)
    return done
