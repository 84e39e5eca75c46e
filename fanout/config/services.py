"""The sections of a fanout config around the search pipeline: caches, `fanout gaps`, `fanout serve`, `--watch`,
storage and the runner (fanout/config/sections.py holds the models' and the pipeline stages' sections). Same
rules: every field has a default with its reason, checked on load with a message naming field, value and fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fanout.config.sections import _at_least, _check


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = True  # persist expansions, query vectors and rerank scores next to the index
    optimize_every: int = 20  # a cache table (and its key index) is compacted every N versions
    # compaction also removes cache table versions older than this; a reader holds one for a single lookup
    # (milliseconds), so a minute leaves a wide margin
    cleanup_after_s: int = 60
    # immutable lookups (cache hits, chunk texts of the pinned version) a long-lived process keeps in memory.
    # 0 = always read Lance
    memory_rows: int = 20_000
    # answers `fanout serve` keeps for repeated identical requests (a re-index invalidates them): a repeat skips
    # the pipeline (docs/performance.md#cli-and-mcp-latency). 0 = answer every request anew
    serve_answers: int = 256

    def validate(self) -> None:
        _at_least("cache", self, 0, "optimize_every", "cleanup_after_s")
        _check(self.memory_rows >= 0, f"cache.memory_rows must be >= 0, got {self.memory_rows}")
        _check(self.serve_answers >= 0, f"cache.serve_answers must be >= 0, got {self.serve_answers}")


@dataclass(frozen=True)
class GapsConfig:
    """`fanout gaps`: which answered queries count as unanswered or weakly answered, and how they are grouped."""

    # a query's best score below this: unanswered; the score that kept every relevant top-1 page and dropped
    # every nonsense one (docs/benchmark.md#score-calibration)
    unanswered_below: float = 0.7
    # ...below this (and >= unanswered_below): weakly answered; the band ends just below the level of a page
    # found by vectors alone (docs/benchmark.md#score-calibration)
    weak_below: float = 0.83
    # average-linkage cosine distance under which two queries join one group (scikit-learn
    # AgglomerativeClustering distance_threshold), fitted on the benchmark's flagged queries
    cluster_distance: float = 0.5
    cluster_exact_max: int = 3000  # distinct flagged queries clustered exactly; more: fit on a sample of this
    seed: int = 0  # the sample's random seed (a rerun gives the same groups)
    top_queries: int = 3  # most typical queries shown per group (closest to its centroid)
    top_terms: int = 6  # terms shown per group (tf-idf of the group's queries against all flagged ones)
    top_pages: int = 3  # closest pages shown per group
    max_groups: int = 200  # groups in the report (largest first); the parquet has every flagged query

    def validate(self) -> None:
        _check(0.0 <= self.unanswered_below <= self.weak_below <= 1.0,
               f"gaps: need 0 <= unanswered_below <= weak_below <= 1, got {self.unanswered_below} and "
               f"{self.weak_below}")
        _check(0.0 < self.cluster_distance <= 2.0,
               f"gaps.cluster_distance must be in (0, 2] (cosine distance), got {self.cluster_distance}")
        for k in ("cluster_exact_max", "top_queries", "top_terms", "top_pages", "max_groups"):
            _check(getattr(self, k) >= 1, f"gaps.{k} must be >= 1, got {getattr(self, k)}")


@dataclass(frozen=True)
class ServeConfig:
    """Limits of the interactive faces: `fanout serve` (and the same checks on an in-process query)."""

    max_results: int = 1000  # the largest `n` (-n) one query may ask for, served or in-process
    max_body_kb: int = 1024  # the largest request body `fanout serve` reads; larger gets 413
    idle_timeout_s: float = 10.0  # a connection silent this long while its request is due is closed
    request_timeout_s: float = 30.0  # a request (headers and body) must arrive whole within this, else 408
    # connections `fanout serve` holds at once; one more is answered 503. An idle one costs a few KB and a file
    # descriptor (docs/performance.md#serve-under-load)
    max_connections: int = 512
    # the listening socket's queue of connections not yet accepted (uvicorn's `backlog`, capped by the kernel's
    # somaxconn): a short queue makes a burst of clients wait for SYN retries
    backlog: int = 2048
    max_headers: int = 100  # header lines one request may send; more gets 431 (as Python's http.server had)
    max_header_kb: int = 16  # the request line and headers together; larger gets 431 (h11's default limit)
    # collections one request may search: each is searched in turn under the search lock, so a long list
    # would hold every other request up
    max_collections: int = 16

    def validate(self) -> None:
        _at_least("serve", self, 1, "max_results", "max_body_kb", "max_connections", "backlog", "max_headers",
                  "max_header_kb", "max_collections")
        _check(self.idle_timeout_s > 0, f"serve.idle_timeout_s must be > 0 seconds, got {self.idle_timeout_s}")
        _check(self.request_timeout_s >= self.idle_timeout_s,
               f"serve.request_timeout_s must be >= serve.idle_timeout_s ({self.idle_timeout_s}), got "
               f"{self.request_timeout_s}")


@dataclass(frozen=True)
class WatchConfig:
    """`--watch` on `fanout index`, `serve` and `mcp` (fanout/api/watcher.py): how file events become index rounds.

    Events come from watchfiles (the OS's file notifications, no polling of our own); a batch of them runs one
    incremental round (only notes whose stat changed are read; searches go on meanwhile). Figures:
    docs/performance.md#index-rounds and #watch-mode.
    """

    # a batch closes once no event came for this long (watchfiles' `step`): an editor's save or a `git checkout`
    # arrives as a burst within milliseconds and becomes one round
    step_ms: int = 300
    # the longest a batch keeps growing while events keep coming (watchfiles' `debounce`): a note saved again
    # and again is still indexed this often
    debounce_ms: int = 3000
    # how often the idle watcher wakes in Python (watchfiles' `rust_timeout`): the first round and retries run
    # at a tick, once the file watch is in place
    tick_ms: int = 1000
    # seconds between tries after a round failed (a `fanout index` of the same collection running, a full disk):
    # its changes stay due and the watcher keeps going
    retry_s: float = 10.0
    # a round reads only the paths its events name; a whole walk (every file stat'ed) runs this often anyway,
    # and after a restart of the OS watch or a failed round, so an event the OS dropped is caught within it
    full_walk_every_s: float = 300.0
    # where a watcher's rounds run: "process" (a worker process kept between rounds: fanout/api/round_worker.py),
    # "thread" (the watcher's thread, beside the searches), "auto" (a process under the in-process runner on a
    # POSIX system, else a thread). A round's Python in a thread shares the GIL with the searches: their p99
    # during a 50-note round was 6.4-10x idle at 20,000 notes, 14x at 133,000; 0.9-1.5x and 1.0x with the round
    # in the worker (bench/search_during_round.py, docs/performance.md#searches-beside-a-round). The worker
    # borrows this process's embedder per call; it costs its start once and ~220 MB (PSS: Python, pyarrow,
    # lancedb, the tokenizer)
    rounds_in: str = "auto"

    def validate(self) -> None:
        for k in ("step_ms", "debounce_ms", "tick_ms"):
            _check(isinstance(getattr(self, k), int) and getattr(self, k) >= 1,
                   f"watch.{k} must be a whole number of milliseconds >= 1, got {getattr(self, k)!r}")
        _check(self.debounce_ms >= self.step_ms,
               f"watch.debounce_ms must be >= watch.step_ms ({self.step_ms}), got {self.debounce_ms}")
        _check(self.retry_s > 0, f"watch.retry_s must be > 0 seconds, got {self.retry_s}")
        _check(self.rounds_in in ("auto", "process", "thread"),
               f"watch.rounds_in must be auto, process or thread, got {self.rounds_in!r}")
        _check(self.full_walk_every_s > 0,
               f"watch.full_walk_every_s must be > 0 seconds, got {self.full_walk_every_s}")


@dataclass(frozen=True)
class StorageConfig:
    """Object-store access for `--db s3://...` (and batch files); "" = the usual environment variable."""

    endpoint: str = ""  # S3-compatible endpoint URL (MinIO, moto, R2); "" = $AWS_ENDPOINT_URL or AWS itself
    region: str = ""  # bucket region; "" = $AWS_REGION or $AWS_DEFAULT_REGION
    allow_http: bool = False  # allow a plain-http endpoint (implied by an http:// endpoint)
    access_key_id: str = field(default="", repr=False)  # "" = $AWS_ACCESS_KEY_ID; prefer the environment
    secret_access_key: str = field(default="", repr=False)  # "" = $AWS_SECRET_ACCESS_KEY; never logged
    session_token: str = field(default="", repr=False)  # "" = $AWS_SESSION_TOKEN
    options: dict = field(default_factory=dict, hash=False, repr=False)  # extra LanceDB storage_options

    def validate(self) -> None:
        _check(not self.endpoint or self.endpoint.startswith(("http://", "https://")),
               f"storage.endpoint must start with http:// or https://, got {self.endpoint!r}")
        _check(isinstance(self.options, dict),
               f"storage.options must be a mapping of LanceDB storage options, got {type(self.options).__name__}")


@dataclass(frozen=True)
class RunnerConfig:
    mode: Literal["auto", "inproc", "ray"] = "auto"  # auto: Ray for batches >= ray_min_rows, else in-process
    ray_min_rows: int = 64  # batches at least this large go to Ray in auto mode
    # ...and only on a machine with this many cores (or attached to a cluster): a private local Ray adds start-up
    # and no core, so on a small machine the in-process loop wins at every size (docs/performance.md#query-cost)
    local_ray_min_cores: int = 8
    ray_address: str = ""  # attach to a cluster ("" = $RAY_ADDRESS or a quiet private local Ray)
    object_store_mb: int = 512  # object store size of a local Ray
    model_resource: str = ""  # custom resource that model actors require (pins them to model nodes)
    placement_timeout_s: float = 60.0  # fail fast when actors cannot be placed
    max_retries: int = 2  # an actor killed mid-batch is restarted and its batch retried
    slice_rows: int = 64  # queries per in-process batch (and per resumable part of an in-process job)
    # a Ray Data job's input blocks: about this many queries, at least two blocks per actor of its widest
    # pool; smaller blocks cost more CPU a query in hand-offs (docs/performance.md#query-cost)
    block_rows: int = 256
    # a Ray Data job of at most this many queries is read by the driver (held in memory) instead of by read
    # tasks, whose processes add to a job's start (docs/performance.md#query-cost); larger jobs stream
    driver_read_rows: int = 100_000
    # a Ray Data pool starts at most one actor per call the job has for it: a 1-query job does not load the
    # model in every configured actor
    size_pools_to_job: bool = True
    # before each model pool the blocks are cut so that each actor gets about this many (0 = keep the read
    # blocks): a few large blocks left a wide pool waiting on its busiest actor (docs/performance.md#scale-out)
    model_blocks_per_actor: int = 8
    # a slice goes through the stages in steps of about this long, so batch progress moves steadily while
    # embedding batches stay full
    progress_step_s: float = 1.0
    # before a Ray Data job runs, check on each node that the paths its tasks need there are readable/writable,
    # so a bad mount fails at once, naming the node
    check_paths: bool = True
    # a Ray Data job whose pools ask for more CPUs than the cluster has scales every pool's num_cpus down by one
    # factor and logs it (num_cpus is Ray's reservation, not threads). false: such a job is refused
    fit_pools: bool = True

    def validate(self) -> None:
        _check(self.mode in ("auto", "inproc", "ray"),
               f"runner.mode must be one of ['auto', 'inproc', 'ray'], got {self.mode!r}")
        _check(self.local_ray_min_cores >= 1, f"runner.local_ray_min_cores must be >= 1, got {self.local_ray_min_cores}")
        _check(self.slice_rows >= 1, f"runner.slice_rows must be >= 1, got {self.slice_rows}")
        _check(self.block_rows >= 1, f"runner.block_rows must be >= 1, got {self.block_rows}")
        _check(self.driver_read_rows >= 0,
               f"runner.driver_read_rows must be >= 0 (0 = never), got {self.driver_read_rows}")
        _check(self.model_blocks_per_actor >= 0,
               f"runner.model_blocks_per_actor must be >= 0 (0 = off), got {self.model_blocks_per_actor}")
        _check(self.progress_step_s > 0, f"runner.progress_step_s must be > 0, got {self.progress_step_s}")
