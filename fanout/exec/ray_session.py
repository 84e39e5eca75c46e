"""What the Ray-side helpers (fanout/exec/ray_data.py, fanout/exec/node_paths.py) need of the Ray runner: a
Protocol, so they name it without importing fanout/exec/ray_runner.py, which imports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fanout.config import Config
from fanout.errors import PlacementError


class RaySession(Protocol):
    """The part of `RayRunner` that ray_data.py and node_paths.py call."""

    cfg: Config

    @property
    def private(self) -> bool: ...  # the quiet private local Ray this runner started (one node: this machine)

    def ray_data(self) -> Any: ...  # the `ray.data` module (Ray is imported by the runner only)

    def nodes(self) -> list[dict[str, Any]]: ...

    def on_nodes(self, fn: Callable[..., object], args: dict[str, tuple], timeout_s: float) -> dict[str, Any]: ...

    def placement_error(self, role: str, model: bool = True) -> PlacementError: ...
