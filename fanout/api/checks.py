"""Argument checks shared by the API's calls and `fanout.ray.search`: each refuses a value of the wrong kind with
a `UserError` (a `ConfigError` for `config`) naming the argument."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fanout.config import Config, ConfigError, load_config
from fanout.errors import UserError

if TYPE_CHECKING:
    from fanout.pipelines.search import SearchOptions

RUNNER_MODES = ("auto", "inproc", "ray")


def check_count(value: object, name: str) -> int:
    """`value` when it is a whole number >= 1, else UserError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"`{name}` must be a whole number >= 1, got {value!r}")
    return value


def check_flag(value: object, name: str, none: bool = False, none_means: str = "the config's default") -> Any:
    """`value` when it is True or False (or None where `none`: `none_means`), else UserError naming `name`: a
    string such as "no" is truthy, and taking it as True would rebuild or expand what was not asked."""
    if isinstance(value, bool) or (none and value is None):
        return value
    if type(value).__name__ == "bool_":  # numpy's bool (a DataFrame cell), without importing numpy
        return bool(value)
    allowed = f"True, False or None ({none_means})" if none else "True or False"
    raise UserError(f"`{name}` must be {allowed}, got {type(value).__name__} {str(value)[:40]!r}")


def runner_mode(runner: Any) -> str | None:
    """`runner` when it is None or one of RUNNER_MODES, else UserError."""
    if runner is not None and runner not in RUNNER_MODES:
        raise UserError(f"`runner` must be one of {list(RUNNER_MODES)}, got {runner!r}")
    return runner


def resolve_config(config: str | os.PathLike | Config | None) -> Config:
    """A Config from a profile name, a YAML path or a Config (None: $FANOUT_CONFIG or local)."""
    if isinstance(config, Config):
        return config
    if config is not None and not isinstance(config, str | os.PathLike):
        raise ConfigError(f"`config` must be a profile name (e.g. 'local', 'fake'), a YAML path or a "
                          f"fanout Config, got {type(config).__name__}")
    return load_config(None if config is None else os.fspath(config))


def batch_options(cfg: Config, *, n: object, min_score: object, filter: Any, expand: object, rerank: object,
                  explain: object, sections: object) -> SearchOptions:
    """`KnowledgeBase.batch`'s arguments checked, as the `SearchOptions` of its job (UserError naming the one
    that is wrong)."""
    from fanout.api.requests import check_min_score, check_sections
    from fanout.filters import as_option, parse_filter
    from fanout.pipelines.search import SearchOptions

    opts = SearchOptions(n=check_count(n, "n"), min_score=check_min_score(min_score),
                         expand=check_flag(expand, "expand", none=True), rerank=check_flag(rerank, "rerank", none=True),
                         filter=as_option(parse_filter(filter)), explain=check_flag(explain, "explain"),
                         sections=check_sections(sections, cfg.retrieve.max_sections))
    if opts.sections and opts.explain:
        raise UserError("`sections` and `explain` together are not supported by batch yet; run the job twice, "
                        "or use `search` for the explained answers with sections")
    return opts
