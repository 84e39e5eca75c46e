"""What a run of a stage list reads, writes and reports, whatever the runner (fanout/exec/runner.py `Runner.run`,
fanout/exec/ray_data.py `run`): its `Source` (parquet files or tables), its `Parts` (resumable parquet output),
its `Run` (the output tables, then the `RunStats`: per-stage seconds and counters, merged across workers),
the counters a Ray Data block carries (`STATS_COLUMN`, `counted_call`), and `Steps` (progress per row)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

STATS_COLUMN = "_stage_stats"  # a Ray Data block's stage counters (JSON RunStats) on some rows, null on the rest
WRITTEN = pa.schema([(STATS_COLUMN, pa.string())])  # what a block written as a part hands on


@dataclass
class RunStats:
    """What a run's stages report, as data: per stage the seconds spent inside it and its counters (each
    stage's `stats` dict), summed over every batch and every worker (datatrove's stat_update, merged)."""

    seconds: dict[str, float] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, other: RunStats) -> None:
        for k, v in other.seconds.items():
            self.seconds[k] = self.seconds.get(k, 0.0) + v
        for name, c in other.counters.items():
            mine = self.counters.setdefault(name, {})
            for k, v in c.items():
                mine[k] = mine.get(k, 0) + v

    def to_json(self) -> str:
        return json.dumps({"seconds": self.seconds, "counters": self.counters})

    @classmethod
    def from_json(cls, text: str) -> RunStats:
        d = json.loads(text)
        return cls(dict(d.get("seconds", {})), {k: dict(v) for k, v in d.get("counters", {}).items()})

    @classmethod
    def since(cls, seconds: dict[str, float], counters: dict[str, dict[str, Any]], seconds0: dict[str, float],
              counters0: dict[str, dict[str, Any]]) -> RunStats:
        """The difference between two snapshots of cumulative timers and counters (numbers only)."""
        out = cls({k: v - seconds0.get(k, 0.0) for k, v in seconds.items()})
        for name, c in counters.items():
            before = counters0.get(name, {})
            out.counters[name] = {k: v - before.get(k, 0) for k, v in c.items()
                                  if isinstance(v, (int, float)) and not isinstance(v, bool)}
        return out


def pop_stats(table: pa.Table) -> tuple[pa.Table, RunStats]:
    """`table` without its STATS_COLUMN, and the RunStats its rows carried (empty when it has none)."""
    out = RunStats()
    if STATS_COLUMN not in table.column_names:
        return table, out
    for text in table.column(STATS_COLUMN).drop_null().to_pylist():
        out.add(RunStats.from_json(text))
    return table.drop_columns([STATS_COLUMN]), out


def counted_call(table: pa.Table, stages: list[tuple[str, Any]]) -> pa.Table:
    """Run named stages over `table`, timing each and taking the growth of its counters; the result carries
    them in STATS_COLUMN (row 0), merged with what `table` carried."""
    table, carried = pop_stats(table)
    for name, stage in stages:
        before = dict(getattr(stage, "stats", {}))
        t = time.perf_counter()
        table = stage(table)
        dt = time.perf_counter() - t
        carried.add(RunStats.since({name: dt}, {name: dict(getattr(stage, "stats", {}))}, {}, {name: before}))
    if not table.num_rows:  # nothing to carry it (a stage that drops every row): the counters are lost
        return table
    col = [carried.to_json()] + [None] * (table.num_rows - 1)
    return table.append_column(STATS_COLUMN, pa.array(col, pa.string()))


@dataclass
class Source:
    """What a run reads: parquet `files` (on `filesystem`; `rows` in all when known; each table cast to
    `schema` when given) or `tables` the driver holds."""

    files: list[str] = field(default_factory=list)
    filesystem: Any = None
    rows: int = 0
    schema: pa.Schema | None = None
    tables: list[pa.Table] | None = None

    def read(self, rows: int) -> Iterator[pa.Table]:
        """The input as tables of at most `rows` rows (a held table is sliced; a file is read in batches)."""
        import pyarrow.parquet as pq

        if self.tables is not None:
            for t in self.tables:
                for i in range(0, t.num_rows, rows):
                    yield t.slice(i, rows)
            return
        for f in self.files:
            with (self.filesystem.open_input_file(f) if self.filesystem else open(f, "rb")) as fh:
                for b in pq.ParquetFile(fh).iter_batches(batch_size=rows):
                    t = pa.Table.from_batches([b])
                    yield t.cast(self.schema) if self.schema is not None else t


@dataclass
class Parts:
    """Where a run writes its output as parquet parts (a resumable job's state): `directory` on `filesystem`
    (a pyarrow filesystem). The in-process loop writes each output table here from the driver (`write`: the
    `schema`'s columns, named by the table's first `_row`, tmp + rename so a part is whole or absent); on
    Ray Data the last operator's actors write theirs (`write_block`), so the answered rows never pass
    through the driver."""

    filesystem: Any
    directory: str
    schema: pa.Schema | None = None

    def files(self) -> list[str]:
        import pyarrow.fs as pafs

        info = self.filesystem.get_file_info(pafs.FileSelector(self.directory, allow_not_found=True, recursive=True))
        return sorted(f.path for f in info if f.type == pafs.FileType.File and f.path.endswith(".parquet"))

    def write(self, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        first = table["_row"][0].as_py()
        if self.schema is not None:
            table = table.select(self.schema.names).cast(self.schema)
        tmp = f"{self.directory}/.part-{first:012d}.tmp"
        try:
            pq.write_table(table, tmp, filesystem=self.filesystem)
        except BaseException:  # a full disk: the cut-short part must not keep the space it took
            try:
                self.filesystem.delete_file(tmp)
            except OSError:
                pass
            raise
        self.filesystem.move(tmp, f"{self.directory}/part-{first:012d}.parquet")

    def write_block(self, table: pa.Table) -> pa.Table:
        """A Ray Data block written here (in the actor that made it) as a part; what is handed on is only its
        stage counters (WRITTEN: one row)."""
        table, stats = pop_stats(table)
        if table.num_rows:
            self.write(table)
        return pa.table({STATS_COLUMN: [stats.to_json()]}, schema=WRITTEN)


class Steps:
    """Progress per row, not per slice: a slice goes through the stages in steps sized to take about `seconds`
    each (one row first, then as many as the measured rate allows), so an `on_rows(done)` callback moves per
    query when queries are slow (a local LLM's seconds each) and per step when they are fast."""

    def __init__(self, seconds: float):
        self.seconds, self.rate = seconds, 0.0  # rate: rows per second, measured

    def run(self, pipe: Callable[[pa.Table], pa.Table], table: pa.Table, on_rows: Callable[[int], object]) -> pa.Table:
        out, i = [], 0
        while i < table.num_rows:
            k = max(1, int(self.rate * self.seconds)) if self.rate else 1
            t = time.perf_counter()
            out.append(pipe(table.slice(i, k)))
            k = min(k, table.num_rows - i)
            self.rate = k / max(time.perf_counter() - t, 1e-6)
            i += k
            on_rows(i)
        return pa.concat_tables(out, promote_options="permissive") if out else pipe(table)


class Run:
    """One run of a stage list: iterate it for the output tables (in input order in-process, as
    blocks finish on Ray Data); `stats` (RunStats) is complete once it is exhausted."""

    def __init__(self, tables: Callable[[RunStats], Iterator[pa.Table]]):
        self.stats = RunStats()
        self._it = tables(self.stats)

    def __iter__(self) -> Iterator[pa.Table]:
        return self._it
