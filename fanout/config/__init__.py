"""Configuration (base layer): YAML files loaded into frozen dataclasses, one per stage or actor (sections.py;
services.py: caches, gaps, serve, watch, storage, runner), with bounded YAML (safe_yaml.py) and the shared
names of kinds and lanes (vocab.py). Imports nothing of fanout but fanout.errors. The bundled profiles ship as
package data (`data_dir("configs")`), loadable by name.

Every field has a default (the value the benchmark chose, see configs/local.yaml for the reasons) and is
checked on load with a message that names the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from fanout.config.remote import ROLES as MODEL_ROLES
from fanout.config.remote import RemoteConfig, ServedSpec, is_served, served_spec
from fanout.config.safe_yaml import YAMLLimitError, load_bounded
from fanout.config.sections import (
    ActorConfig,
    ChunkConfig,
    CleanConfig,
    ConfigError,
    ExpandConfig,
    FakeConfig,
    FuseConfig,
    IndexConfig,
    ModelsConfig,
    ProbeConfig,
    RerankConfig,
    RetrieveConfig,
    _check,
)
from fanout.config.services import (
    CacheConfig,
    GapsConfig,
    RunnerConfig,
    ServeConfig,
    StorageConfig,
    WatchConfig,
)


def data_dir(name: str) -> Path:
    """A data folder fanout ships ("configs", "samples"): under the installed package (the wheel puts them in
    fanout/), else at the top of the source checkout, where the design keeps them."""
    pkg = Path(__file__).resolve().parent.parent
    return pkg / name if (pkg / name).is_dir() else pkg.parent / name


CONFIG_DIR = data_dir("configs")  # the bundled profiles (local, fake, production, ...), loadable by name
CONFIG_MAX_DEPTH = 16  # a config file nested deeper is refused (the deepest section is 3 levels)
CONFIG_MAX_SIZE = 200_000  # characters of a config file with its YAML aliases expanded
MAX_MESSAGE = 1000  # a config error message is cut to this many characters


@dataclass(frozen=True)
class Config:
    models: ModelsConfig = field(default_factory=ModelsConfig)
    fake: FakeConfig = field(default_factory=FakeConfig)
    # n_batch / n_ubatch 512: the embedder's fastest per token; the expander and reranker did not care
    # (docs/performance.md#model-calls-on-the-cpu)
    embedder: ActorConfig = field(default_factory=lambda: ActorConfig(n_ctx=512, batch_size=8, n_batch=512,
                                                                      n_ubatch=512))
    expander: ActorConfig = field(default_factory=lambda: ActorConfig(num_cpus=0.5, n_ctx=1024, batch_size=8,
                                                                      n_batch=512, n_ubatch=512))
    reranker: ActorConfig = field(default_factory=lambda: ActorConfig(num_cpus=0.5, n_ctx=1024, batch_size=40,
                                                                      n_batch=512, n_ubatch=512))
    # the retrieval pool (Ray Data): CPU actors that each open the collection once and run parse, probe,
    # cache lookups, full text + vectors + alias lanes, fusion and formatting; batch_size = queries per call
    retriever: ActorConfig = field(default_factory=lambda: ActorConfig(count=1, num_cpus=0.25, batch_size=64))
    # the cache writer (Ray Data): ONE actor commits the rows the workers return, deduped by key
    writer: ActorConfig = field(default_factory=lambda: ActorConfig(count=1, num_cpus=0.25, batch_size=256))
    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    expand: ExpandConfig = field(default_factory=ExpandConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)
    fuse: FuseConfig = field(default_factory=FuseConfig)
    rerank: RerankConfig = field(default_factory=RerankConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    gaps: GapsConfig = field(default_factory=GapsConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)  # `--watch`: file events -> index rounds
    remote: RemoteConfig = field(default_factory=RemoteConfig)  # servers of `openai:` model specs (docs/served-models.md)

    def validate(self) -> Config:
        for role in ("embedder", "expander", "reranker", "retriever", "writer"):
            getattr(self, role).validate(role)
        self.models.validate()
        self.remote.validate()
        for role in MODEL_ROLES:
            if is_served(getattr(self.models, role)):
                served_spec(getattr(self.models, role), role)
        self.fake.validate()
        self.chunk.validate()
        self.index.validate()
        self.fuse.validate()
        self.retrieve.validate()
        self.expand.validate()
        self.clean.validate()
        self.rerank.validate()
        self.cache.validate()
        self.serve.validate()
        from fanout.schemas import LANE_KINDS

        bad = set(self.retrieve.lanes) - set(LANE_KINDS)
        _check(not bad, f"retrieve.lanes: unknown lanes {sorted(bad)}; allowed: {sorted(LANE_KINDS)}")
        self.runner.validate()
        self.storage.validate()
        self.gaps.validate()
        self.watch.validate()
        return self

    def served(self, role: str) -> ServedSpec | None:
        """The server of a model role (`models.<role>: openai:<model>@<base_url>`), or None for a local model."""
        spec = getattr(self.models, role, "")
        return served_spec(spec, role) if self.models.backend != "fake" and is_served(spec) else None

    def pool(self, section: str) -> ActorConfig:
        """The actor pool of a config section as the runners size it: a served role's pool is light (it holds
        an HTTP client, no model): remote.num_cpus, no GPU, one instance, and calls of remote.batch_size x
        remote.concurrency rows, so one call keeps every request slot busy."""
        acfg = getattr(self, section)
        if section not in MODEL_ROLES or self.served(section) is None:
            return acfg
        return dataclasses.replace(acfg, num_cpus=self.remote.num_cpus, n_gpu_layers=0, instances=1,
                                   batch_size=self.remote.batch_size * self.remote.concurrency)

    def replace(self, **sections: dict[str, Any]) -> Config:
        """Return a copy with some fields of some sections changed: `cfg.replace(rerank={"enabled": True})`."""
        return _merge(self, sections).validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _short(value: Any, limit: int = 80) -> str:
    """A value for an error message: its repr, cut to `limit` characters (a config value can be huge)."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<a deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


# Keys that were settings once: a config that still sets one fails with what to do instead (ignoring it would
# let a user believe the old setting still chose something)
RETIRED = {
    "runner.engine": "runner.engine is gone: where a job runs is one setting, runner.mode (auto|inproc|ray; "
                     "`--runner` on the command line); a Ray job always runs as one Ray Data Dataset and an "
                     "in-process job as the loop. Remove runner.engine from the config",
}


# Settings of experiments that were measured, left off and removed: the message says where the figures are
_LANES_GONE = "docs/benchmark.md#without-an-agent; git tag experiment/title-heading-lanes"
_REMOVED = {
    "clean": (("split_lists", "max_list_items", "snap_titles", "max_snaps", "snap_min_cover", "fuzzy_cutoff",
               "question_answer", "mine_titles", "max_mined", "max_family", "w_mined", "w_snap", "w_copied_lex",
               "w_question_answer", "w_meta_answer", "w_foreign"),
              "docs/benchmark.md#weak-fields-field-hygiene; git tag experiment/clean-opt-in-rules"),
    "retrieve": (("title_role", "heading_text"), _LANES_GONE),
    "fuse": (("w_title_vec", "w_heading_vec"), _LANES_GONE),
    "expand": (("ground_hits", "ground_chars"), "docs/benchmark.md#without-an-agent; git tag experiment/grounded-fields"),
}
for _section, (_keys, _where) in _REMOVED.items():
    for _key in _keys:
        RETIRED[f"{_section}.{_key}"] = (f"{_section}.{_key} was removed: the benchmark measured it and left it off "
                                         f"({_where}). Remove it from the config")


def _retired(name: str, value: object) -> None:
    if name in RETIRED:
        raise ConfigError(f"{RETIRED[name]} (given {_short(value)})")


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping of keys to values, got "
                          f"{type(data).__name__} {_short(data)}; allowed keys: {sorted(known)}")
    for key, value in (data or {}).items():
        _retired(f"{where}.{key}" if where else key, value)
        if key not in known:
            raise ConfigError(f"{where or 'config'}: unknown key {_short(key)}; allowed: {sorted(known)}")
        default = getattr(cls(), key)
        name = f"{where}.{key}" if where else key
        if dataclasses.is_dataclass(default):
            kwargs[key] = _build(type(default), value, name)
        elif isinstance(default, tuple):
            if isinstance(value, str):
                value = [value]  # `languages: en` means one language, not ('e', 'n')
            if not isinstance(value, (list, tuple)):
                raise ConfigError(f"{name} must be a list, got {_short(value)}")
            kwargs[key] = tuple(value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ConfigError(f"{name} must be true or false, got {_short(value)}")
            kwargs[key] = value
        elif isinstance(default, (int, float)) and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise ConfigError(f"{name} must be a number, got {_short(value)}")
        elif isinstance(default, int) and isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{name} must be a whole number, got {_short(value)}")
        elif isinstance(default, str) and not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {_short(value)}")
        else:
            kwargs[key] = type(default)(value) if isinstance(default, (int, float, str)) else value
    return dataclasses.replace(cls(), **kwargs) if kwargs else cls()


def _merge(obj: Any, changes: dict[str, Any], where: str = "") -> Any:
    kwargs = {}
    for key, value in changes.items():
        _retired(f"{where}.{key}" if where else key, value)
        cur = getattr(obj, key)
        if dataclasses.is_dataclass(cur) and isinstance(value, dict):
            kwargs[key] = _merge(cur, value, f"{where}.{key}" if where else key)
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
    data, p = _read_profile(name)
    try:
        return _build(Config, data, "").validate()
    except ConfigError as e:
        msg = f"config {p}: {e}"
        raise ConfigError(msg if len(msg) <= MAX_MESSAGE else msg[:MAX_MESSAGE] + "...") from None


def _read_profile(name: str, depth: int = 0) -> tuple[dict[str, Any], Path]:
    """A profile's YAML as a dict (with its `extends` chain merged) and the file it came from."""
    if not name.strip():
        raise ConfigError("config name is empty; give a YAML path or a profile name")
    p = Path(name).expanduser()
    if p.suffix not in (".yaml", ".yml"):  # a profile name (it may contain a dot: "local-1.5b")
        p = CONFIG_DIR / f"{name}.yaml"
    if not p.is_file():
        choices = sorted(x.stem for x in CONFIG_DIR.glob("*.yaml"))
        raise ConfigError(f"config {name!r} not found (no file {p}); give a YAML path or one of {choices}")
    try:
        data = load_bounded(p.read_text(encoding="utf-8"), CONFIG_MAX_DEPTH, CONFIG_MAX_SIZE)
    except YAMLLimitError as e:
        raise ConfigError(f"config {p} is refused: {e}; write the values out plainly (at most "
                          f"{CONFIG_MAX_DEPTH} levels deep, {CONFIG_MAX_SIZE} characters with aliases expanded)"
                          ) from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {p} is not UTF-8 text (byte {e.start}); re-save it as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"config {p} cannot be read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"config {p} is not valid YAML{where}: {getattr(e, 'problem', None) or e}; fix the "
                          "file (indentation, a missing ':' or an unclosed quote/bracket)") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config {p} must be a mapping of sections (models:, chunk:, ...), got a "
                          f"{type(data).__name__}; see configs/local.yaml")
    parent = data.pop("extends", None)
    data.pop("profile", None)
    if parent is not None:
        if not isinstance(parent, str):
            raise ConfigError(f"config {p}: `extends` must name a profile or YAML path, got {_short(parent)}")
        if depth >= 5:
            raise ConfigError(f"config {p}: `extends` chain is deeper than 5 (a loop?); shorten it")
        data = _deep_update(_read_profile(parent, depth + 1)[0], data)
    return data, p
