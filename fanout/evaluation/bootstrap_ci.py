"""Bootstrap confidence intervals for benchmark metrics (numpy only).

``set_intervals`` gives, per (system, set), the 95% percentile interval of the mean of a per-query
metric; ``paired_diff`` resamples the same queries for two runs and gives the interval of the mean
difference (``"+0.04 to +0.16"``). Both are seeded, so reruns give identical numbers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from fanout.evaluation.bench_data import set_key

logger = logging.getLogger(__name__)

DEFAULT_N_BOOT = 10_000
DEFAULT_SEED = 0


def _boot_means(x: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)


def bootstrap_mean(
    values: Sequence[float] | np.ndarray,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """Return ``(mean, low, high)``: the percentile bootstrap interval of the mean of ``values`` (NaN bounds
    when ``n_boot`` < 1: `--n-boot 0` turns the intervals off)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return float("nan"), float("nan"), float("nan")
    if n_boot < 1:
        return float(x.mean()), float("nan"), float("nan")
    means = _boot_means(x, n_boot, seed)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(x.mean()), float(low), float(high)


def set_intervals(
    per_query: pa.Table,
    metric: str = "ndcg_5",
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
) -> pa.Table:
    """Return per (system, set): n, mean, low, high of ``metric`` (output of ``per_query_metrics``)."""
    groups: dict[tuple[str, str], list[float]] = {}
    for row in per_query.to_pylist():
        groups.setdefault((row["system"], row["set"]), []).append(float(row[metric]))
    systems = list(dict.fromkeys(k[0] for k in groups))
    out = []
    for system, name in sorted(groups, key=lambda k: (systems.index(k[0]), set_key(k[1]))):
        mean, low, high = bootstrap_mean(groups[(system, name)], n_boot, seed, level)
        out.append(
            {
                "system": system,
                "set": name,
                "metric": metric,
                "n": len(groups[(system, name)]),
                "mean": mean,
                "low": low,
                "high": high,
            }
        )
    return pa.Table.from_pylist(out)


def format_interval(low: float, high: float, digits: int = 2) -> str:
    """Format a signed interval as ``"+0.04 to +0.16"`` (``"-"`` without one: `--n-boot 0`)."""
    if np.isnan(low) or np.isnan(high):
        return "-"
    return f"{low:+.{digits}f} to {high:+.{digits}f}"


def paired_diff(
    per_query_a: pa.Table,
    per_query_b: pa.Table,
    metric: str = "ndcg_5",
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """Paired bootstrap of ``a - b`` per set, over the queries both tables score.

    Returns:
        ``{set: {"n", "mean_diff", "low", "high", "interval", "p_le_zero"}}`` where ``p_le_zero`` is the
        share of resampled mean differences at or below 0 (small = a is reliably better).
    """
    b_by_id = {r["id"]: r for r in per_query_b.to_pylist()}
    diffs: dict[str, list[float]] = {}
    for row in per_query_a.to_pylist():
        other = b_by_id.get(row["id"])
        if other is not None:
            diffs.setdefault(row["set"], []).append(float(row[metric]) - float(other[metric]))
    dropped = per_query_a.num_rows - sum(len(v) for v in diffs.values())
    if dropped:
        logger.warning("paired_diff: %d queries of run a have no pair in run b", dropped)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(diffs, key=set_key):
        d = np.asarray(diffs[name])
        mean, low, high = bootstrap_mean(d, n_boot, seed, level)
        boots = _boot_means(d, n_boot, seed) if n_boot >= 1 else np.full(1, np.nan)
        out[name] = {
            "n": int(d.size),
            "mean_diff": mean,
            "low": low,
            "high": high,
            "interval": format_interval(low, high),
            "p_le_zero": float((boots <= 0).mean()) if n_boot >= 1 else float("nan"),
        }
    return out
