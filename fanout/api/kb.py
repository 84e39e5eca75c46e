"""`fanout.open(db, collection, config)` -> a `KnowledgeBase`: index, search, batch, expand, get, status, gaps.

The CLI, `fanout serve` and MCP answer through the same objects (fanout/api/service.py turns one request into
one response; this module holds the runners, the service and the lock). One code path: `search` is what
`fanout query` runs, `batch` is `fanout batch` (the same resumable job, the same output), `expand` is
`fanout expand`.

Thread safety: one KnowledgeBase may be shared by threads; its calls run one at a time (a lock: llama.cpp models
are not thread-safe), except `index` (and a watcher's rounds): it runs beside searches, which serve the version
before it until its own is ready (fanout/api/next_version.py), its models lent per call. For throughput give many
queries to one `batch` call (Ray when that pays), or open one KnowledgeBase per thread (each loads its models).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Self

from fanout.api.batch_rows import Rows, column_name, input_file
from fanout.api.checks import check_count, check_flag, resolve_config, runner_mode
from fanout.api.next_version import NextVersion
from fanout.api.types import BatchResult, Hits, Note, as_path
from fanout.config import Config
from fanout.errors import RequestError, UserError

if TYPE_CHECKING:
    from fanout.api.requests import Mode, SearchRequest
    from fanout.api.round_worker import RoundWorker
    from fanout.api.service import SearchService
    from fanout.api.types import SearchResponse
    from fanout.api.watcher import Watcher, WatchRound
    from fanout.exec.runner import Runner
    from fanout.gaps.analysis import GapsResult
    from fanout.pipelines.index import IndexReport
    from fanout.store.db import Collection

RunnerMode = Literal["auto", "inproc", "ray"]
AGENT_FIELDS = ("short_query", "rephrased_query", "expected_answer", "intent")


class KnowledgeBase:
    """One collection of one db, with its config, models and stages loaded once and reused across calls.

    Use it as a context manager (or call `close()`): closing releases the models and any Ray session
    fanout started. Build one with `fanout.open`.
    """

    def __init__(self, db: str | os.PathLike, collection: str = "notes",
                 config: str | os.PathLike | Config | None = None, *, runner: RunnerMode | None = None,
                 lent: Runner | None = None):
        from fanout.api.requests import check_collection
        from fanout.store import storage

        self.db = storage.normalize_uri(as_path(db, "db"))
        self.collection = check_collection(collection)
        cfg = resolve_config(config)
        self.cfg = cfg.replace(runner={"mode": runner_mode(runner)}) if runner else cfg
        self.lock = threading.RLock()  # calls run one at a time (a server's own reads take it too)
        self._indexing = threading.Lock()  # one `index` run at a time (it holds `lock` only to publish)
        self._runners: dict[str, Runner] = {}
        self._borrowed: set[str] = set()  # runners a server lent (`attach`): closing leaves them open
        if lent is not None:
            from fanout.exec.runner_mode import job_mode

            mode = job_mode(self.cfg, rows=1)  # the runner its searches ask for
            self._runners[mode], self._borrowed = lent, {mode}
        self._service: SearchService | None = None
        self._next = NextVersion(self.db, self.cfg, self.lock)  # the version searches serve during a round
        self._watchers: list[Watcher] = []  # started by `watch`; `close` stops them
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------------------------
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop its watchers, release the models and stages; a Ray session fanout started for a job ends here."""
        for w in self._watchers:  # first: a round in progress finishes
            w.stop()
        self._next.wait()  # (its swap takes the lock)
        with self._indexing, self.lock:
            for mode, r in self._runners.items():
                if mode not in self._borrowed:
                    r.close()
            self._runners.clear()
            self._service = None
            self._closed = True

    def __repr__(self) -> str:
        return f"KnowledgeBase(db={self.db!r}, collection={self.collection!r})"

    def _runner(self, mode: str) -> Runner:
        from fanout.exec.runner_mode import make_runner

        if self._closed:
            raise UserError(f"{self!r} is closed; open it again with fanout.open(...)")
        if mode not in self._runners:
            self._runners[mode] = make_runner(self.cfg, mode=mode)
        return self._runners[mode]

    @classmethod
    def attach(cls, db: str | os.PathLike, collection: str, config: Config, runner: Runner) -> KnowledgeBase:
        """A KnowledgeBase that answers on `runner`, which its caller holds and closes (the MCP server, tests
        that share one runner): `close()` leaves it open."""
        return cls(db, collection, config, lent=runner)

    @property
    def service(self) -> SearchService:
        """The request -> response service behind `search` and `answer` (its Searchers are shared with them)."""
        return self._svc()

    def _svc(self) -> SearchService:
        from fanout.api.service import SearchService
        from fanout.exec.runner_mode import job_mode

        if self._service is None:
            self._service = SearchService(self.db, self.cfg, self._runner(job_mode(self.cfg, rows=1)))
        return self._service

    # -- index --------------------------------------------------------------------------------------------------
    def index(self, vault: str | os.PathLike, *, rebuild: bool = False, full_check: bool = False,
              progress: bool | Callable[[int, int], Any] = False,
              paths: Iterable[str | os.PathLike] | None = None) -> IndexReport:
        """Index (or bring up to date) the notes of `vault`: new and changed notes are embedded, deleted ones
        removed, unchanged ones kept. Only notes whose file stat changed since the last run are read;
        `full_check` reads and hashes every note and checks every stored vector. Returns an `IndexReport`
        (notes, chunks, skipped notes with reasons).

        `paths`: the notes or folders that changed (relative to the vault, or absolute inside it; added, edited,
        deleted, or either side of a rename or folder move): only they are stat'ed and read, every other note
        keeps what the last run recorded of it (a watch round passes its events). The result is the whole
        walk's; the report's `skipped`/`ignored` then name only what was listed. The whole vault is walked when
        there is no record yet. A path outside the vault raises UserError.

        Returns when the round is done; searches from other threads serve the previous version until the new
        one is ready (`wait_ready`), the caller's own next search waits for it."""
        from fanout.exec.runner_mode import job_mode
        from fanout.pipelines.index import index_vault

        vault = as_path(vault, "vault")
        rebuild = check_flag(rebuild, "rebuild")
        progress = progress if callable(progress) else check_flag(progress, "progress")
        with self.lock:
            runner = self._runner(job_mode(self.cfg, rows=0))
        shared = runner.kind == "inproc"  # (its models lent per call: Runner.role_lock; a Ray job holds the lock)
        self._next.wait()  # (the last round's swap, which takes the lock)
        with self._indexing, (contextlib.nullcontext() if shared else self.lock):
            return self._next.round(self.collection, lambda: index_vault(
                vault, self.db, self.collection, self.cfg, runner, progress=progress, rebuild=rebuild,
                full_check=full_check, paths=paths), hold=shared and not rebuild, service=lambda: self._service,
                forget=self.forget)

    def index_in(self, worker: RoundWorker, vault: str | os.PathLike, *,
                 progress: bool | Callable[[int, int], Any] = False, paths: list[str] | None = None) -> IndexReport:
        """`index` (a watcher's round) run by `worker`, a process of its own (fanout/api/round_worker.py), its chunks
        embedded by this KnowledgeBase's embedder (lent per call); its searches serve the version before it until
        its own is ready, as `index`'s."""
        from fanout.exec.runner_mode import job_mode

        where = os.fspath(as_path(vault, "vault"))
        with self.lock:
            runner = self._runner(job_mode(self.cfg, rows=0))
        self._next.wait()  # (the last round's swap)
        lend = runner if runner.kind == "inproc" else None  # (a Ray runner has no embedder here to lend)
        with self._indexing:
            return self._next.round(self.collection, lambda: worker.index(where, paths=paths, progress=progress,
                                    lend=lend), hold=True, service=lambda: self._service, forget=self.forget)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until searches serve the version the last `index` published; False after `timeout` seconds."""
        return self._next.wait(timeout)

    def warm_index(self) -> None:
        """Load what a writing `index` run loads on first use (lancedb: 1-5 s on 2 cores, pyarrow.parquet, the
        embedder, its tokenizer): a watcher calls it once idle, so a save pays none of it."""
        from fanout.exec.runner_mode import job_mode
        from fanout.pipelines.embed_chunks import warm_writes

        with self.lock:
            runner = self._runner(job_mode(self.cfg, rows=0))
        with self._indexing:  # (not beside a run or `close`)
            warm_writes(self.cfg, runner)

    def watch(self, vault: str | os.PathLike, *, initial: bool = True,
              on_round: Callable[[WatchRound], Any] | None = None,
              progress: bool | Callable[[int, int], Any] = False) -> Watcher:
        """Keep the collection current with `vault` (`fanout index VAULT --watch`): a started `Watcher` that runs a
        round of `index(vault)` per batch of file events (config `watch:`; in a worker process: `watch.rounds_in`),
        and a first round when `initial`. `on_round(WatchRound)` is called after each round; `progress` goes to the
        first round. Stop it with `.stop()`, a `with` block, or `close()`; a failed round is logged and retried."""
        from fanout.api.watcher import Watcher

        if self._closed:
            raise UserError(f"{self!r} is closed; open it again with fanout.open(...)")
        w = Watcher(self, vault, initial=check_flag(initial, "initial"), on_round=on_round,
                    progress=progress if callable(progress) else check_flag(progress, "progress"))
        self._watchers = [x for x in self._watchers if x.running] + [w]
        return w.start()

    # -- search -------------------------------------------------------------------------------------------------
    def search(self, query: str, *, short_query: str | None = None, rephrased_query: str | None = None,
               expected_answer: str | None = None, intent: str | None = None, n: int = 10,
               filter: Mapping[str, Any] | str | None = None, expand: bool | None = None,
               rerank: bool | None = None, explain: bool = False, mode: Mode = "query",
               min_score: float = 0.0, line_numbers: bool = False, full: bool = False,
               collections: list[str] | None = None, sections: int | None = None) -> Hits:
        """The pages that answer `query`, best first: the answers of `fanout query` (`mode="search"`: full text
        only, `"vsearch"`: vectors only, as the commands of those names).

        The agent fields (`short_query`: keywords -> full text; `rephrased_query`: a paraphrase -> vectors;
        `expected_answer`: an answer-like passage -> vectors; `intent`: what the asker wants) replace local
        expansion when given. `filter`: {"folder": ..., "tag": ..., "path": ..., "lang": ...} (a value or a list).
        `expand` / `rerank`: None = the config's default. `sections`: add each page's N best sections (heading,
        file lines, score, snippet, a `ref` that `get` reads back; pages ranked as without). Raises `RequestError` (a `FanoutError`) naming the
        field for bad input, `IndexStateError` when there is no index to search.
        """
        fields = {"short_query": short_query, "rephrased_query": rephrased_query,
                  "expected_answer": expected_answer, "intent": intent}
        for name, value in {"query": query, **fields}.items():
            if value is not None and not isinstance(value, str):
                raise RequestError(f"`{name}` must be text (str), got {type(value).__name__}", field=name)
        if isinstance(filter, Mapping):
            filter = dict(filter)
        given: dict[str, Any] = {"mode": mode, "collections": collections or [self.collection], "query": query,
                                 "n": n, "min_score": min_score, "explain": explain, "full": full,
                                 "line_numbers": line_numbers, "filter": filter, "sections": sections,
                                 **{k: v for k, v in fields.items() if v is not None}}
        if mode == "query":
            given.update(expand=expand, rerank=rerank)
        with self._next.searching():
            svc = self._svc()
            resp = svc.run(svc.parse(given))  # the arguments checked as `fanout serve` checks its JSON
        if resp["errors"]:
            e = resp["errors"][0]
            why = re.sub(r"^row \d+: ", "", e["error"])  # one query: no batch row to name
            raise RequestError(f"{e['field'] or 'query'}: {why}", field=e["field"] or "query")
        return Hits.from_response(resp, query)

    def answer(self, request: SearchRequest | Mapping[str, Any]) -> SearchResponse:
        """One search request -> the JSON-ready response the CLI prints and the server sends (results, errors, timings,
        expansion). `request`: a `SearchRequest`, or the JSON object `fanout serve` takes (mode, collections, query,
        agent fields, n, min_score, filter, expand, rerank, explain, full, line_numbers, sections), parsed into one.
        Raises RequestError for a malformed request; a bad query comes back as an error in `errors`."""
        with self._next.searching():
            return self._svc().run(request)

    def searching(self) -> contextlib.AbstractContextManager[None]:
        """A block of this KnowledgeBase's searches (a face's own, as the MCP tools'): under its lock, on the index
        version its searches serve (during a round, the one before it: fanout/api/next_version.py)."""
        return self._next.searching()

    def warm(self, collections: list[str] | tuple[str, ...] = ()) -> None:
        """Open the searchers of `collections` and load the in-process embedder now, so the first request pays neither
        (a missing index or a model mismatch of those collections is raised here)."""
        with self._next.searching():
            svc = self._svc()
            for name in collections:
                svc.searcher(name, "query")
            svc.runner.preload("embedder")

    @property
    def opened(self) -> set[str]:
        """The collections whose searchers are open now (what `forget` drops)."""
        return self._service.opened if self._service is not None else set()

    def serves_older(self, collections: Iterable[str]) -> bool:  # (before its round's version is ready)
        return any(self._next.holds(n) for n in collections)

    def forget(self, collections: list[str] | tuple[str, ...] | set[str]) -> None:
        """Drop what is open for `collections` (re-indexed or removed since; not those a swap is due for or brought in
        at the pinned versions: fanout/api/next_version.py): the next request reopens them at the manifest's."""
        if self._service is not None and (names := {n for n in collections if not self._next.keeps(n)}):
            self._service.forget(names)

    # -- batch --------------------------------------------------------------------------------------------------
    def batch(self, rows: Rows, *, out: str | os.PathLike | None = None, n: int = 10, min_score: float = 0.0,
              filter: Mapping[str, Any] | str | None = None, expand: bool | None = None,
              rerank: bool | None = None, explain: bool = False, runner: RunnerMode | None = None,
              sections: int | None = None, progress: bool = False, query_column: str = "query",
              id_column: str | None = None, keep_columns: bool = True) -> BatchResult:
        """Answer many queries: what `fanout batch` does, with the same output. `rows`: a pa.Table, a pandas
        DataFrame, a list of dicts (each with `query`, optional `id`, the agent fields, `filter`), or the path/URI of
        a JSONL, CSV or parquet file. A bad row becomes an error row (its id, field and
        reason) and never stops the others. `out`: a .parquet/.jsonl/.csv path or URI to write (resumable: the same
        call after a kill redoes only the unfinished rows); None keeps the answers in memory. `runner`: "inproc",
        "ray" (Ray Data; a running Ray session or cluster is used), or "auto" (the config's rule: Ray for big jobs on
        big machines). `sections`: each page's N best sections as a `sections` list column (parquet; JSON text in CSV;
        a `sections` list per result in JSONL), one row per page as without. `progress`: a bar on stderr.
        In-memory rows (a table, a DataFrame, a list of dicts, or a list of query strings) may name their query
        column (`query_column`) and id column (`id_column`, else `id` when there is one, else one is made per row:
        `row-N`); with `keep_columns` their other columns come back on every answer row of `to_arrow()` /
        `to_pandas()` (matched by id; the `out` file keeps `fanout batch`'s columns). A table without the query
        column, or whose columns collide with the answers' own, is refused before any work."""
        from fanout.api.checks import batch_options
        from fanout.exec.progress import Progress
        from fanout.exec.runner_mode import job_mode
        from fanout.io.batch_output import check_out
        from fanout.pipelines.batch import run_batch
        from fanout.pipelines.search import Searcher

        opts = batch_options(self.cfg, n=n, min_score=min_score, filter=filter, expand=expand, rerank=rerank,
                             explain=explain, sections=sections)
        progress = check_flag(progress, "progress")
        query_column = column_name(query_column, "query_column")
        id_column = None if id_column is None else column_name(id_column, "id_column")
        with self.lock, tempfile.TemporaryDirectory(prefix="fanout-batch-") as tmp:
            src, n_rows, extra = input_file(rows, tmp, query_column, id_column, check_flag(keep_columns, "keep_columns"))
            dest = os.fspath(out) if out is not None else os.path.join(tmp, "answers.parquet")
            check_out(dest, src, self.cfg.storage)
            mode = job_mode(self.cfg, runner_mode(runner), rows=n_rows, path=src)
            runner_ = self._runner(mode)
            searcher = Searcher(self.db, self.collection, self.cfg, runner_)
            with (Progress("batch", "query") if progress else contextlib.nullcontext()) as bar:
                st = run_batch(src, dest, searcher, opts, on_slice=bar)
            if out is not None:
                return BatchResult(out=dest, stats=st, storage=self.cfg.storage, extra=extra)
            from fanout.io.batch_output import read_output

            return BatchResult(out=None, stats=st, table=read_output(dest), extra=extra)  # read before the folder goes

    def expand(self, rows: Rows, *, runner: RunnerMode | None = None, progress: bool | None = False) -> dict[str, Any]:
        """Precompute expansions of `rows` (as for `batch`) into the collection's cache, so later searches of
        the same queries call no expander (`fanout expand`). Returns counters: queries, expanded, cached, agent,
        errors, seconds."""
        from fanout.exec.runner_mode import job_mode
        from fanout.pipelines.precompute import run_expand

        progress = check_flag(progress, "progress", none=True, none_means="a bar when stderr is a terminal")
        with self.lock, tempfile.TemporaryDirectory(prefix="fanout-expand-") as tmp:
            src, n_rows, _ = input_file(rows, tmp, keep_columns=False)
            mode = job_mode(self.cfg, runner_mode(runner), rows=n_rows, path=src)
            st = run_expand(src, self.db, self.collection, self.cfg, self._runner(mode), progress=progress)
            self._service = None  # cached expansions are read anew
            return st

    # -- notes and state ----------------------------------------------------------------------------------------
    def get(self, ref: str, *, max_lines: int | None = None) -> Note:
        """A note by path, title or alias, optionally a section (`Note#Heading > Sub`) or file lines
        (`Note:40-60`): what `fanout get` prints. Never reads outside the vault (`NoteError` says why)."""
        from fanout.api.notes import get_note

        if not isinstance(ref, str) or not ref.strip():
            raise UserError(f"`ref` must be a note's path, title or alias (text), got {ref!r}")
        if max_lines is not None:
            check_count(max_lines, "max_lines")
        return Note(**get_note(self._collection(), ref, max_lines))

    def status(self, detail: bool = False) -> dict[str, Any]:
        """What the collection holds: vault, notes, chunks, languages, models, when it was indexed
        (`detail`: table versions and cache sizes too), as `fanout status --json` prints it."""
        from fanout.api.catalog import status

        return status(self._collection(), self.cfg, detail=check_flag(detail, "detail"))

    def gaps(self, answers: str | os.PathLike, out: str | os.PathLike, *, previous: str | None = None,
             progress: bool = False) -> GapsResult:
        """The gap report of a batch's answers file (`fanout gaps`): the questions the notes do not answer,
        grouped, written to `out` (report.md, report.html, flagged.parquet, groups.parquet). Returns the
        result: `.stats` (queries, answered, weak, unanswered, ...) and `.groups` (name, asks, band, pages).
        `previous`: an earlier report folder to compare with."""
        from fanout.exec.progress import Progress
        from fanout.gaps.report import make_report

        with self.lock, (Progress("gaps: reading answers", "byte") if check_flag(progress, "progress") else contextlib.nullcontext()) as bar:
            return make_report(as_path(answers, "answers"), as_path(out, "out"), self.db, self.collection,
                               self.cfg, previous=previous, progress=bar)

    def _collection(self) -> Collection:
        from fanout.store.db import Collection

        if self._closed:
            raise UserError(f"{self!r} is closed; open it again with fanout.open(...)")
        col = Collection(self.db, self.collection, self.cfg)
        col.refresh()  # the table versions the manifest pins: what searches are served
        return col


def open(db: str | os.PathLike = ".fanout/db", collection: str = "notes",
         config: str | os.PathLike | Config | None = None, *, runner: RunnerMode | None = None) -> KnowledgeBase:
    """Open collection `collection` of the index at `db` (a folder or an object-store URI such as s3://...).

    `config`: a bundled profile by name ("local": the default models; "fake": stand-in models for tests;
    "production"), a YAML path, or a `Config`; None = $FANOUT_CONFIG or "local". `runner`: where jobs run
    ("auto", "inproc", "ray"; None = the config's `runner.mode`). Nothing is loaded until first use; the db
    may not exist yet (`index` creates it).

        with fanout.open(".fanout/db", config="fake") as kb:
            kb.index("notes/")
            hits = kb.search("how do I sync?")
    """
    return KnowledgeBase(db, collection, config, runner=runner)

