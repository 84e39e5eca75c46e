"""The public API's result types: `Hit` / `Hits` (a search's pages), `BatchResult` (a batch job's answers),
`Note` (what `get` reads); `SearchResponse`, the JSON-ready answer `fanout serve` sends and `Hits` is made from. Arrow is the interchange format: every result converts with `.to_arrow()` and
`.to_pandas()` (pandas only when asked for)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, SupportsIndex, TypedDict, overload

import pyarrow as pa

if TYPE_CHECKING:
    import pandas as pd

HIT_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("path", pa.string()), ("title", pa.string()), ("heading", pa.string()),
    ("snippet", pa.string()), ("score", pa.float64()), ("collection", pa.string()), ("line", pa.int32()),
])


class ResultRow(TypedDict):
    """One page of a SearchResponse (what `Hit` is made from)."""

    collection: str
    rank: int
    path: str
    title: str
    heading: str | None
    snippet: str | None
    score: float
    sections: NotRequired[list[dict[str, Any]]]  # sections=N
    explain: NotRequired[dict[str, Any]]  # explain
    line: NotRequired[int | None]  # line_numbers or full
    section: NotRequired[dict[str, Any]]  # full


class ErrorRow(TypedDict):
    """Why the query was refused (in one collection: the same row fails the same way in the others)."""

    collection: str
    field: str | None
    error: str


class SearchResponse(TypedDict):
    """The answer to a SearchRequest as JSON: what `KnowledgeBase.answer` returns, `fanout serve` sends and the
    CLI prints (fanout/api/service.py builds it)."""

    mode: str
    collections: list[str]
    results: list[ResultRow]
    errors: list[ErrorRow]
    timings: dict[str, float]  # seconds per stage, summed over the collections; `total`
    expansion: dict[str, str]  # collection -> where the variants came from (agent, cache, model, ...)
    explain: NotRequired[dict[str, Any]]  # explain: the query-level facts (query, probe, filter)
    answered: NotRequired[str]  # "memory": `fanout serve` gave a remembered answer


@dataclass(frozen=True, slots=True)
class Hit:
    """One page a search returned, with its best passage.

    `rank` is 1-based; `score` is in [0, 1] (the fused score over the best any page could reach, or the
    reranker's blend); `heading` is the passage's heading path ("" at the top of a note); `line` is the file
    line where the passage starts (only with `line_numbers=True`, else None); `explain` holds every list's
    rank and score for this page (only with `explain=True`); `section` the whole section's text (`full=True`);
    `sections` the page's best sections (only with `sections=N`): dicts of heading, line_from, line_to (file
    lines, 1-based), score, snippet and ref (what `get` reads them back with), best first.
    """

    rank: int
    path: str
    title: str
    heading: str
    snippet: str
    score: float
    collection: str
    line: int | None = None
    explain: dict[str, Any] | None = None
    section: dict[str, Any] | None = None
    sections: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Hits(list[Hit]):
    """A search's pages, best first (a list of `Hit`), with what the query became.

    `query`: the query as searched; `expansion`: where its variants came from per collection (agent, cache,
    model, fallback, probe_skip, none); `timings`: seconds per stage; `explain`: the query-level facts when
    `explain=True` (probe, filter).
    """

    def __init__(self, hits: list[Hit], query: str = "", expansion: dict[str, str] | None = None,
                 timings: dict[str, float] | None = None, explain: dict[str, Any] | None = None):
        super().__init__(hits)
        self.query = query
        self.expansion = expansion or {}
        self.timings = timings or {}
        self.explain = explain

    @classmethod
    def from_response(cls, resp: SearchResponse, query: str = "") -> Hits:
        """The service's JSON-ready response (fanout/api/service.py) as typed hits."""
        hits = [Hit(rank=r["rank"], path=r["path"], title=r["title"], heading=r["heading"] or "",
                    snippet=r["snippet"] or "", score=float(r["score"]), collection=r["collection"],
                    line=r.get("line"), explain=r.get("explain"), section=r.get("section"),
                    sections=r.get("sections"))
                for r in resp["results"]]
        return cls(hits, query, resp.get("expansion"), resp.get("timings"), resp.get("explain"))

    def to_arrow(self) -> pa.Table:
        """One row per page: rank, path, title, heading, snippet, score, collection, line; plus `sections` (a
        list of the SECTION struct per page, fanout/schemas.py) when the search asked for sections."""
        schema = HIT_SCHEMA
        if any(h.sections is not None for h in self):
            from fanout.schemas import SECTION

            schema = HIT_SCHEMA.append(pa.field("sections", pa.list_(SECTION)))
        return pa.Table.from_pylist([{f.name: getattr(h, f.name) for f in schema} for h in self], schema=schema)

    @overload
    def __getitem__(self, i: SupportsIndex) -> Hit: ...
    @overload
    def __getitem__(self, i: slice) -> Hits: ...

    def __getitem__(self, i: SupportsIndex | slice) -> Hit | Hits:  # a slice stays `Hits` (query, expansion, ...)
        if isinstance(i, slice):
            return Hits(super().__getitem__(i), self.query, self.expansion, self.timings, self.explain)
        return super().__getitem__(i)

    def to_pandas(self) -> pd.DataFrame:
        """A DataFrame; `rank` and `line` stay integer columns where a value is missing (pandas' nullable Int32)."""
        return _to_pandas(self.to_arrow())

    def __repr__(self) -> str:
        return f"Hits({self.query!r}, {len(self)} pages: {[h.path for h in self[:5]]}{'...' if len(self) > 5 else ''})"


@dataclass
class BatchResult:
    """What `KnowledgeBase.batch` answered: the output of `fanout batch` (one row per page of every query, one
    row per bad query with its `field` and `error`; columns qid, rank, path, title, heading, snippet, score,
    field, error, query), held in memory (`out=None`) or in the file `out`, and the job's counters
    (`stats`: queries, errors, resumed, expansion sources, seconds, stage timings).
    """

    out: str | None
    stats: dict[str, Any] = field(default_factory=dict)
    table: pa.Table | None = None
    storage: Any = None  # the config's storage section, to read `out` back (object stores included)
    extra: Any = None  # the caller's columns joined onto the answers (fanout/api/batch_rows.py Extra), or None

    @property
    def queries(self) -> int:
        return int(self.stats.get("queries", 0))

    @property
    def errors(self) -> int:
        return int(self.stats.get("errors", 0))

    def to_arrow(self) -> pa.Table:
        """The answers, one row per page (and per bad query), with the caller's own columns of in-memory rows."""
        if self.table is None:
            from fanout.io.batch_output import read_output

            assert self.out is not None  # held in memory (out=None) means the table is set
            self.table = read_output(self.out, self.storage)
            if self.extra is not None:
                self.table = self.extra.join(self.table)
        elif self.extra is not None and not self.extra.joined:
            self.table = self.extra.join(self.table)
        return self.table

    def to_pandas(self) -> pd.DataFrame:
        """A DataFrame; integer columns (`rank`, `line`) stay integers on error rows (pandas' nullable Int)."""
        return _to_pandas(self.to_arrow())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.to_arrow().to_pylist())

    def __len__(self) -> int:
        return self.to_arrow().num_rows


@dataclass(frozen=True)
class Note:
    """A note (or the section or line range a reference names) read from the vault: `path` relative to the
    vault, `title`, `heading` (the section's heading path, None for the whole body), `first_line` (the file
    line of `text`'s first line), `text`, `lang`."""

    path: str
    title: str
    heading: str | None
    first_line: int
    text: str
    lang: str | None = None

    @property
    def lines(self) -> tuple[int, int]:
        """(first, last) file line of `text`."""
        return self.first_line, self.first_line + max(0, self.text.count("\n"))


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """`table.to_pandas()` with Arrow integer columns as pandas' nullable integers: a null (an error row's
    rank) would otherwise turn the whole column into float64."""
    import pandas as pd

    ints = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
            pa.int64(): pd.Int64Dtype()}
    return table.to_pandas(types_mapper=ints.get)


def as_path(value: object, what: str) -> str:
    """A str or os.PathLike as a string; anything else is a typed error naming the argument."""
    import os

    from fanout.errors import UserError

    if isinstance(value, Path | os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):  # what the text names is checked where it is used (an empty vault path, ...)
        if "\x00" in value:  # no file system takes it (os and Arrow would raise their own errors)
            raise UserError(f"`{what}` holds a NUL character (\\x00): {value[:60]!r}; give the path without it")
        return value
    raise UserError(f"`{what}` must be a path or URI (str or os.PathLike), got {type(value).__name__} "
                    f"{str(value)[:60]!r}")
