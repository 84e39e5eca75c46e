"""Argument checks shared by the API's calls and `fanout.ray.search`: each refuses a value of the wrong kind with
a `UserError` naming the argument."""

from __future__ import annotations

from typing import Any

from fanout.errors import UserError


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
