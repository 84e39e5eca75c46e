"""The sections of a fanout config: one frozen dataclass per stage or actor, each with its checks.

Every field has a default (the value the benchmark chose; the comments say why and point to the figures in
docs/benchmark.md and docs/performance.md) and is checked on load with a message that names the field, the
value and what is allowed. `fanout/config/__init__.py` puts them together (`Config`) and loads YAML profiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fanout.errors import FanoutError


class ConfigError(FanoutError, ValueError):
    """A config value is out of range or of the wrong type."""


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
    # models per Ray Data actor, each taking one of its calls at a time (fanout/exec/runner.py Instances; GPU: production)
    instances: int = 1
    # the embedder: texts per embed() call for a search's query vectors (0 = batch_size). 1: a query's vectors
    # do not depend on which texts share its call (llama.cpp's sums follow the decode's shape; packed, the two
    # engines' vectors differ by ~1e-3). Packed by default: one a call cost 30% more CPU a text on 2 threads
    # (bench/query_embed_calls.py; docs/performance.md#model-calls-on-the-cpu)
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
    max_tokens: int = 450  # token budget per chunk (ties 900, fits one ubatch: docs/benchmark.md#chunk-size)
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
    # front matter larger than this (characters, with every YAML alias expanded): skipped (bad_yaml); this
    # is what refuses an alias bomb, a few hundred bytes that expand to gigabytes, before anything expands
    front_matter_max_chars: int = 1_000_000
    # a note's aliases, tags, description or filterable properties holding more characters than this
    # (each field counted on its own): the note is skipped (bad_front_matter); every chunk carries them
    max_field_chars: int = 10_000
    # the vectors a run writes are read back and checked; a full check (`fanout index --full-check`) reads
    # every stored vector, and damaged rows are re-embedded
    verify: bool = True
    # the stat fast path trusts a note's recorded hash only when the record was taken this long after the
    # file's mtime and ctime: a write in the same timestamp tick as the read keeps the stat (git's "racy"
    # files); 2 s covers the coarsest common clocks (FAT, SMB), not only ext4's and APFS's fine ones
    stat_racy_s: float = 2.0
    # Lance's full-text indexes are rebuilt (every row tokenized again) once the rows added or deleted since
    # their build pass this share of the chunks; below it an index round leaves them: the memory full-text
    # engine (the default) scores every row exactly whatever their age, and Lance searches the newer rows
    # without the index. Lance's own incremental update (optimize) keeps the deleted rows in its statistics,
    # so its scores would differ from a rebuild's. 0 = rebuild after every change
    fts_rebuild_share: float = 0.1
    # a table of more fragments than this has its small ones merged at the end of an index run: every write
    # leaves one (each round one more) and a round's reads and file checks cost per fragment; the merged rows
    # are renumbered (read again by the next files) and Lance's full-text index is rebuilt (seconds at tens
    # of thousands of chunks, once every this many rounds). 0 = after every run
    compact_fragments: int = 128
    # embedded notes are written at least this often, in one write per table: a killed run loses at most this
    # much embedding, and a fast embedder's groups (the fake one, a GPU) do not each cost a table version and
    # a fragment. 0 = one write per group
    write_every_s: float = 10.0
    # below this vector search is brute force: exact and fast enough; at twice this the index was an order of
    # magnitude faster (bench/index_scale.py; docs/performance.md#storage-at-scale)
    vector_index_min_rows: int = 50000
    # up to this many chunks a vector search is exact: the batch's query vectors against every chunk vector as
    # one matrix product (numpy/BLAS) over a copy of the pinned version's vectors that each retrieval process
    # loads once (rows x dim x 4 bytes: 184 MB at 60,000 x 768); above it LanceDB's vector index answers. Exact
    # CPU grows with the rows: at 150,000 it is 6.9 ms a query against 5.6 for the index with re-scoring
    # (ann_rescore), but the index costs 7.4 CPU-s more to start per process (loading it; 2.3 GB RSS against
    # 1.0), repaid after ~5,700 queries, and below this the lists are exact (docs/performance.md#query-cost-
    # at-scale; bench/query_cost.py, bench/vector_cost.py). 0 = always Lance.
    exact_search_rows: int = 150_000
    # BLAS threads of the exact search's products on a large table; 1: a second thread halves the wall of a
    # lone batch but costs ~20% more CPU (it spins; docs/performance.md#query-cost-at-scale), and batch jobs
    # run several retrieval processes anyway. 0 = the library's default (all cores)
    exact_threads: int = 1
    # keep those vectors in a file per chunks version next to a local index (fanout/store/vectors_file.py;
    # written by `fanout index` and by the first process that loads them): every process (each Ray retrieval
    # actor) memory-maps one copy shared through the page cache instead of reading and normalising its own
    # (docs/performance.md#query-cost-at-scale). Object stores: a copy per process as without it
    exact_vectors_file: bool = True
    # IVF_HNSW_SQ: with the query settings below it keeps recall@10 near 1.0 at a fraction of brute force's
    # time; IVF_RQ stopped at a lower recall, IVF_PQ built many times slower (bench/index_scale.py;
    # docs/performance.md#storage-at-scale)
    vector_index_type: Literal["IVF_PQ", "IVF_RQ", "IVF_SQ", "IVF_HNSW_SQ", "IVF_HNSW_PQ", "IVF_FLAT"] = "IVF_HNSW_SQ"
    vector_partitions: int = 0  # IVF partitions; 0 = sqrt(rows)
    vector_sub_vectors: int = 0  # PQ sub-vectors; 0 = dim / 16
    hnsw_m: int = 20  # HNSW graph degree
    hnsw_ef_construction: int = 300  # HNSW build beam width
    # query time, above index.exact_search_rows; bench/vector_cost.py at 400,000 clustered 768-d rows, k=60
    # (docs/performance.md): refine 2 -> 1 halves the CPU (Lance's re-rank reads each candidate's full vector)
    # at recall@10 0.985-0.99; nprobes 3-10 and ef 40-60 find the same there, 10 costing ~10-40% more than 5;
    # without refine (SQ distances only) recall is 0.955. Larger tables (more partitions) may want more probes
    nprobes: int = 5  # IVF partitions searched per query (50 gave no more recall at 100k)
    refine_factor: int = 1  # without a vectors file: Lance re-ranks k x this exactly (SQ alone: 0.92-0.96)
    # on a local index, the index's k x this best by SQ distance re-scored exactly from the version's vectors
    # file instead of Lance's refine (which reads each candidate from the table): at 400,000 rows recall@10
    # 1.000 against 0.989, 2.0-2.8 ms a query vector against 5.5-6.0 (3: 2.9; bench/vector_cost.py;
    # docs/performance.md#query-cost-at-scale). 0 = Lance's refine_factor
    ann_rescore: int = 2
    ef: int = 60  # HNSW beam width, at least k x refine_factor; 0 = Lance's default
    # Matryoshka size of the searched vectors (embeddinggemma: 512/256/128); 0 = the embedder's full size.
    # Full it is: every smaller size loses nDCG@5 on at least 3 of the 4 benchmark sets (bench/matryoshka.py;
    # docs/benchmark.md#matryoshka-sizes), and search cost does not matter below the vector index threshold.
    # A smaller size only pays where index memory does (1M rows: 3 GB at 768).
    vector_dim: int = 0

    def validate(self) -> None:
        known = {"en", "ru", "de", "fr", "es", "it", "pt"}
        _check(bool(self.languages), f"index.languages must name at least one language of {sorted(known)}")
        for lang in self.languages:
            _check(lang in known, f"index.languages: unknown language {lang!r}; known: {sorted(known)}")
        _check(self.max_note_mb > 0, f"index.max_note_mb must be > 0, got {self.max_note_mb}")
        _at_least("index", self, 0, "stat_racy_s", "fts_rebuild_share", "compact_fragments", "write_every_s")
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
    # qmd: lex/vec/hyde lines under a grammar; fields: the agent's three fields from the MCP descriptions
    # (fanout/agent_fields.py). qmd stays the local default because expansion is off there (the 0.5B's qmd
    # lines did not help); local-1.5b uses fields, which with the 1.5B (precomputed) scored above hybrid on
    # three of the four benchmark sets (docs/benchmark.md#without-an-agent).
    format: Literal["qmd", "fields"] = "qmd"
    fields: tuple[str, ...] = ("short_query", "rephrased_query", "expected_answer")  # fields format: which to write
    titles_in_prompt: bool = False  # fields format: list the collection's page titles in the prompt
    max_titles: int = 1000  # at most this many titles in the prompt (fewer when they do not fit n_ctx)
    # fields format: show the model the original query's top BM25 pages (title > heading: snippet), so it
    # writes fields grounded in this knowledge base rather than in what it guesses the words mean (the 1.5B
    # read `корзина` as a shopping cart). 0 = off; the probe's lists are reused when the search ran one.
    # Off: grounding helped Russian keyword queries, hurt English paraphrases and doubled the seconds
    # (bench/no_agent/ground_screen.yaml; docs/benchmark.md#without-an-agent).
    ground_hits: int = 0
    ground_chars: int = 160  # each grounding snippet is cut to this many characters
    # which expansion kinds are searched (lex -> full text, vec/hyde -> vectors); the cache keeps every line,
    # so a subset is tried without generating again (bench/no_agent/full.yaml)
    use_kinds: tuple[str, ...] = ("lex", "vec", "hyde")
    # `fanout expand` also embeds each query's vector-lane variants into the query-vector cache, so a later
    # search of a precomputed query calls no model at all (its embedding moves offline:
    # docs/benchmark.md#without-an-agent)
    precompute_vectors: bool = True

    def validate(self) -> None:
        from fanout.config.vocab import EXPAND_FORMATS, FIELD_KINDS

        _check(self.format in EXPAND_FORMATS,
               f"expand.format must be one of {sorted(EXPAND_FORMATS)}, got {self.format!r}")
        bad = [f for f in self.fields if f not in FIELD_KINDS]
        _check(bool(self.fields) and not bad,
               f"expand.fields must be some of {sorted(FIELD_KINDS)}, got {list(self.fields)}; fix or remove them")
        _check(self.max_titles > 0, f"expand.max_titles must be > 0, got {self.max_titles}")
        _check(self.ground_hits >= 0, f"expand.ground_hits must be >= 0, got {self.ground_hits}")
        _check(self.ground_chars > 0, f"expand.ground_chars must be > 0, got {self.ground_chars}")
        bad = [k for k in self.use_kinds if k not in ("lex", "vec", "hyde")]
        _check(not bad, f"expand.use_kinds must be some of ['hyde', 'lex', 'vec'], got {list(self.use_kinds)}")


@dataclass(frozen=True)
class CleanConfig:
    """Field hygiene (pipelines/clean_fields.py): repairs the shapes a weak writer gives its fields."""

    # Chosen on en-base and en-tricky; the Russian sets, run afterwards, changed no value (bench/weak_fields/
    # hygiene.yaml; docs/benchmark.md#weak-fields-field-hygiene). On: the rules that helped weak fields and
    # never hurt the strong agent's.
    enabled: bool = True  # run the CleanFields stage at all (after ExpandQueries)
    sources: tuple[str, ...] = ("agent", "cache", "model", "fallback")  # variant sources cleaned
    split_lists: bool = False  # a comma/semicolon short_query becomes one lex per item (off: -0.003/-0.005 weak)
    max_list_items: int = 3  # items kept from such a list
    lex_max_words: int = 4  # a longer lex keeps its first distinctive terms (0 = off; +0.003 weak en-base)
    snap_titles: bool = False  # a lex naming a title/alias also searches it (off: strong -0.009/-0.005)
    max_snaps: int = 2  # titles added per lex
    snap_min_cover: float = 0.5  # a title's words must be at least this share of the lex's content words
    fuzzy_cutoff: float = 0.88  # difflib ratio for a misspelt whole title (0 = off)
    foreign_lex_to_vec: bool = True  # a lex in no language of the notes (and no title) goes to vectors
    question_answer: Literal["keep", "vec", "drop"] = "keep"  # a question in expected_answer (vec: -0.007 weak)
    meta_answer: Literal["keep", "strip", "drop"] = "strip"  # "the documentation should explain X" -> X
    # titles named in rephrased_query / expected_answer become lex variants: never, only when no lex is a
    # title already, or always
    mine_titles: Literal["off", "weak", "always"] = "off"
    max_mined: int = 2  # titles mined per query
    w_mined: float = 1.0  # fusion weight multiplier of a mined title
    max_family: int = 0  # a snapped/mined title whose words recur in more other titles is skipped (0 = off)
    w_snap: float = 1.0  # fusion weight multiplier of a snapped title
    w_copied_lex: float = 1.0  # ... of a lex whose words all come from the question
    w_question_answer: float = 1.0  # ... of a question-shaped expected_answer
    w_meta_answer: float = 1.0  # ... of an expected_answer whose "documentation" frame was stripped
    w_foreign: float = 1.0  # ... of a field in no language of the notes

    def validate(self) -> None:
        srcs = ("agent", "cache", "model", "fallback")
        bad = [s for s in self.sources if s not in srcs]
        _check(not bad, f"clean.sources must be some of {sorted(srcs)}, got {list(self.sources)}")
        for name, allowed in (("question_answer", ("drop", "keep", "vec")), ("meta_answer", ("drop", "keep", "strip")),
                              ("mine_titles", ("always", "off", "weak"))):
            _check(getattr(self, name) in allowed,
                   f"clean.{name} must be one of {sorted(allowed)}, got {getattr(self, name)!r}")
        _at_least("clean", self, 1, "max_list_items")
        _at_least("clean", self, 0, "lex_max_words", "max_family", note=" (0 = off)")
        _at_least("clean", self, 0, "max_snaps", "max_mined")
        _check(0 <= self.snap_min_cover <= 1, f"clean.snap_min_cover must be in [0, 1], got {self.snap_min_cover}")
        _check(0 <= self.fuzzy_cutoff <= 1, f"clean.fuzzy_cutoff must be in [0, 1] (0 = off), got {self.fuzzy_cutoff}")
        _at_least("clean", self, 0, "w_mined", "w_snap", "w_copied_lex", "w_question_answer", "w_meta_answer",
                  "w_foreign", note=" (0 drops the variant)")


@dataclass(frozen=True)
class RetrieveConfig:
    k: int = 20  # hits per list
    fts_boost_title: float = 2.0  # BM25 column boosts: title + aliases (English sweep, docs/benchmark.md)
    fts_boost_heading: float = 1.0  # heading path
    fts_boost_body: float = 1.0  # chunk text
    # which lanes run (ablations turn some off); + title_vec / heading_vec (pipelines/retrieve_titles.py):
    # off, each lowered no-agent nDCG@5 on three of the four sets (docs/benchmark.md#without-an-agent)
    lanes: tuple[str, ...] = ("fts", "vec", "alias")
    hyde_prompt: Literal["query", "document"] = "document"  # embed hyde lines with the document prompt
    snippet_tokens: int = 60  # a result's snippet: the ~60-token run of lines with the most query terms
    snippet_chars: int = 300  # ... cut to this many characters around its first term (display cuts further)
    title_role: Literal["query", "document"] = "document"  # embedder prompt of title/alias/heading vectors (not tuned)
    heading_text: Literal["heading", "breadcrumb"] = "breadcrumb"  # embed "title > heading" or the heading (not tuned)
    # full-text results as row ids, their path/chunk_id taken from the pinned version's rows in memory (built
    # once per version: ~100 MB per million chunks per retrieval process); above this many chunks each call
    # reads the two columns itself. Results are identical; the memory path costs less CPU per call
    # (bench/query_cost.py; docs/performance.md#query-cost). 0 turns it off.
    rowid_map_rows: int = 2_000_000
    # who runs a full-text call: `memory` computes Lance's BM25 in numpy over postings built once per index
    # version with Lance's tokenizer (fanout/store/fts_memory.py: the same lists and scores, bit for bit, prefiltered
    # or not; indexes it does not reproduce go to Lance); `lance` calls Lance itself (pylance, pinned to the
    # Lance release lancedb embeds: identical lists, tests/test_fts_rowids.py). memory costs about a tenth of
    # Lance's CPU a call (bench/fts_engines.py; docs/performance.md#full-text-engines)
    fts_engine: Literal["memory", "lance"] = "memory"
    # the memory engine's postings are built per process and index version once its Lance calls on that version
    # have cost this many times the build's estimated CPU (per chunk and column; the figures:
    # docs/performance.md#query-cost): a batch builds after its first call, a one-off search of a large index
    # is not held up, and 1.0 never spends more than twice the cheaper choice (the ski-rental rule; 0 builds
    # at the first call). fanout/store/fts.py memory_columns
    fts_memory_after: float = 1.0
    # keep the memory engine's postings in a file per index version and column next to a local index
    # (fanout/store/fts_postings.py; written by `fanout index`/`fanout optimize` and by a process that built
    # them): every process (each Ray retrieval actor) memory-maps them at its first call, tens of ms instead of a
    # 10-12 CPU-s build at 60,000 chunks, the pages shared (docs/performance.md#query-cost-at-scale). Object stores:
    # built per process as without it. false: never read or written
    fts_postings_file: bool = True
    # the largest --sections N (sections per returned page, pipelines/pick_sections.py): pages of the benchmark
    # corpus have a median of a few sections and rarely over 20 (docs/benchmark.md#sections); a cap keeps one
    # request's answer bounded
    max_sections: int = 20
    # result chunks' title/heading/text are read by row id; once those reads have cost this many times what
    # reading the three columns of every row once costs (the ski-rental rule, as fts_memory_after), a table
    # of at most text_memory_rows rows keeps them in memory for its pinned version (~0.7 KB a chunk: 43 MB at
    # 60,000; a read by row id costs ~0.11 ms a chunk on an index of many fragments, docs/performance.md
    # #query-cost-at-scale). 0 rows: always by row id
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
    k: int = 60  # RRF constant (Cormack et al. 2009)
    w_original: float = 2.0  # weight of the original query's lists
    w_lex: float = 1.0  # weight of lex variants (full-text)
    w_vec: float = 1.0  # weight of vec variants (paraphrases)
    w_hyde: float = 1.0  # weight of hyde variants (answer-shaped sentences)
    w_alias: float = 2.0  # weight of the exact title/alias lane
    w_title_vec: float = 1.0  # weight of the query-vector-vs-title/alias-vectors lane (1 and 2 tried, EN sets)
    w_heading_vec: float = 1.0  # weight of the query-vector-vs-heading-vectors lane (only 1 tried, EN sets)
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
    # passages of one query decoded together as parallel sequences (actors/reranker.py ParallelScorer); 1 = one
    # by one, the scores the benchmark measured. For a GPU (bench/gpu_check.sh --rerank-parallel;
    # docs/performance.md#gpu)
    parallel: int = 1

    def validate(self) -> None:
        _check(self.parallel >= 1, f"rerank.parallel must be >= 1, got {self.parallel}")
