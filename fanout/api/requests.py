"""A search request, parsed once where JSON comes in (`fanout serve`, `KnowledgeBase.answer`, the CLI's request)
into a frozen `SearchRequest`; `KnowledgeBase.search` builds one from its arguments the same way. Everything
behind (fanout/api/service.py) reads the typed fields, never the dict.

`parse_search_request` is the one check: each error is a `RequestError` that names the field, what was given,
what is allowed and how to fix it. The query's text fields and `filter` are the row's: the pipeline's row parser
(pipelines/parse_queries.py) checks them, so a bad query comes back as an error in the response, as in a batch.
`parse_tool_search` parses the MCP tool `search`'s arguments (`limit` for `n`, qmd's `searches` as typed
`SubQuery`s) into the same `SearchRequest`, through the same checks and messages.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeAlias, cast

from fanout.config.vocab import MAX_SEARCHES, SEARCH_TYPES
from fanout.errors import RequestError

Mode = Literal["query", "search", "vsearch"]
# each mode's config overrides: `search` full text only, `vsearch` vectors only (no expansion, no rerank)
MODES: dict[str, dict[str, Any]] = {
    "query": {},
    "search": {"retrieve": {"lanes": ("fts",)}},
    "vsearch": {"retrieve": {"lanes": ("vec",)}},
}
ROW_FIELDS = ("query", "intent", "short_query", "rephrased_query", "expected_answer")
FLAGS = ("expand", "rerank", "explain", "full", "line_numbers")  # true, false or null (the config's default)
REQUEST_FIELDS = ("mode", "collections", "n", "min_score", "filter", "sections", *FLAGS, *ROW_FIELDS)
COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # fanout.store.db.check_collection_name's rule
COLLECTION_RULE = ("letters, digits, `_`, `-` and `.`, starting with a letter or digit, at most 100 characters; "
                   "`fanout collection list` names them")
JSON: TypeAlias = "str | int | float | bool | list[Any] | dict[str, Any] | None"  # a value as JSON gives it
SearchType = Literal["lex", "vec", "hyde"]  # fanout.config.vocab.SEARCH_TYPES
# the MCP tool `search`'s arguments: the row's text fields, qmd's `searches`, `limit` (n) and three options
TOOL_FIELDS = ("query", "short_query", "rephrased_query", "expected_answer", "intent", "searches", "limit",
               "rerank", "filter", "sections")


@dataclass(frozen=True)
class SubQuery:
    """One of qmd's typed searches (`searches: [{type, query}]`): `lex` keywords (full text), `vec` a question,
    `hyde` an answer-like passage (both vectors), as `short_query`, `rephrased_query` and `expected_answer`
    are. `query` is text; the row parser normalises it and checks its length, as for the named fields."""

    type: SearchType
    query: str


@dataclass(frozen=True)
class SearchRequest:
    """One search, checked (`parse_search_request`): what `fanout serve` takes as JSON and what
    `KnowledgeBase.search` asks for. `collections` empty: the default collection."""

    mode: Mode = "query"
    collections: tuple[str, ...] = ()
    n: int = 10
    min_score: float = 0.0
    sections: int = 0  # each page's N best sections; 0: pages only
    expand: bool | None = None  # None: the config's default
    rerank: bool | None = None
    explain: bool = False
    full: bool = False
    line_numbers: bool = False
    # the row: checked by the pipeline's row parser (a bad value is an error in the response, as in a batch)
    filter: JSON = None
    query: JSON = None
    intent: JSON = None
    short_query: JSON = None
    rephrased_query: JSON = None
    expected_answer: JSON = None
    searches: tuple[SubQuery, ...] = ()  # qmd's typed sub-queries (the MCP tool's `searches`)

    def row(self) -> dict[str, Any]:
        """The query as a batch row (id `q`), with the text fields and `searches` given (`filter` is the
        search's option: `SearchService.run`; the MCP tool puts it in the row)."""
        row = {"id": "q", **{k: v for k in ROW_FIELDS if (v := getattr(self, k)) is not None}}
        if self.searches:
            row["searches"] = [{"type": s.type, "query": s.query} for s in self.searches]
        return row

    def to_json(self) -> dict[str, Any]:
        """The request as the JSON object it parses from (what `fanout serve` remembers an answer under)."""
        out = {**asdict(self), "collections": list(self.collections) or None, "sections": self.sections or None}
        if not self.searches:
            del out["searches"]  # not a field of `fanout serve`'s requests
        return out


def parse_search_request(req: object, max_results: int, max_sections: int = 20,
                         max_collections: int = 16) -> SearchRequest:
    """`req` (a JSON object of REQUEST_FIELDS) as a SearchRequest, or RequestError naming the first bad field.

    The limits are the config's: `max_results` serve.max_results, `max_sections` retrieve.max_sections,
    `max_collections` serve.max_collections.
    """
    if not isinstance(req, Mapping):
        raise RequestError(f"the request must be an object with the fields {list(REQUEST_FIELDS)}, got "
                           f"{type(req).__name__}")
    extra = sorted(str(k) for k in set(req) - set(REQUEST_FIELDS))
    if extra:
        raise RequestError(f"unknown request field {extra[0][:40]!r}; allowed: {list(REQUEST_FIELDS)}")
    for key, value in req.items():
        if not _encodable(value):
            raise RequestError(f"`{key}` holds a lone surrogate (JSON \\ud800-\\udfff alone): not Unicode text; "
                               "send the text as UTF-8")
    mode = req.get("mode", "query")
    if not isinstance(mode, str) or mode not in MODES:
        raise RequestError(f"`mode` must be one of {sorted(MODES)}, got {_show(mode)}")
    names = _collections(req.get("collections"), max_collections)
    n = _whole(req.get("n", 10), "n", max_results,
               f"`n` must be a whole number from 1 to {max_results} (serve.max_results), got {{}}")
    sections = check_sections(req.get("sections"), max_sections)
    min_score = check_min_score(req.get("min_score", 0.0))
    flags: dict[str, bool | None] = {}
    for flag in FLAGS:
        value = req.get(flag)
        if value is not None and not isinstance(value, bool):
            raise RequestError(f"`{flag}` must be true, false or null, got {_show(value)}")
        flags[flag] = value
    return SearchRequest(mode=cast(Mode, mode), collections=names, n=n, min_score=min_score, sections=sections,
                         expand=flags["expand"], rerank=flags["rerank"], explain=bool(flags["explain"]),
                         full=bool(flags["full"]), line_numbers=bool(flags["line_numbers"]),
                         filter=req.get("filter"), searches=(), **{k: req.get(k) for k in ROW_FIELDS})


def parse_tool_search(args: object, max_limit: int, max_sections: int) -> SearchRequest:
    """The MCP tool `search`'s arguments (TOOL_FIELDS) as a SearchRequest, or RequestError naming the first bad
    argument: `limit` (1 to `max_limit`) is `n`, `searches` become typed `SubQuery`s, `sections` is checked
    against retrieve.max_sections (`max_sections`) as `fanout serve` checks it. The text fields and `filter`
    are the row's, checked by the row parser (`parse_row`) as in a batch."""
    if not isinstance(args, Mapping):
        raise RequestError(f"the arguments of search must be an object with the fields {list(TOOL_FIELDS)}, got "
                           f"{type(args).__name__}")
    extra = sorted(str(k) for k in set(args) - set(TOOL_FIELDS))
    if extra:
        raise RequestError(f"unknown argument `{extra[0][:40]}` for search; allowed: {list(TOOL_FIELDS)}",
                           field=extra[0][:40])
    n = _whole(args.get("limit", 10), "limit", max_limit,
               f"`limit` must be an integer from 1 to {max_limit}, got {{}}; ask for fewer pages and refine the "
               "query instead")
    rerank = args.get("rerank")
    if rerank is not None and not isinstance(rerank, bool):
        raise RequestError(f"`rerank` must be true or false, got {_show(rerank)}", field="rerank")
    sections = check_sections(args.get("sections"), max_sections)
    return SearchRequest(n=n, rerank=rerank, sections=sections, filter=args.get("filter"),
                         searches=_searches(args.get("searches")), query=args.get("query"),
                         intent=args.get("intent"), short_query=args.get("short_query"),
                         rephrased_query=args.get("rephrased_query"), expected_answer=args.get("expected_answer"))


def _searches(value: object) -> tuple[SubQuery, ...]:
    """qmd's `searches` ([{type, query}], at most MAX_SEARCHES) as SubQuerys, or RequestError naming the entry."""
    if value is None:
        return ()
    if isinstance(value, str):  # the list as JSON text, as a batch row's column may hold it
        try:
            value = json.loads(value)
        except ValueError:
            raise RequestError("`searches` is not valid JSON; give a list of {type, query} objects",
                               field="searches") from None
    if not isinstance(value, list):
        raise RequestError(f"`searches` must be a list of {{type, query}} objects, got {_show(value)}",
                           field="searches")
    if len(value) > MAX_SEARCHES:
        raise RequestError(f"`searches` has {len(value)} entries, at most {MAX_SEARCHES} are allowed; keep the "
                           "best ones", field="searches")
    out = []
    for i, s in enumerate(value):
        if not isinstance(s, Mapping):
            raise RequestError(f"`searches[{i}]`: each search must be an object {{type, query}}, got {_show(s)}",
                               field=f"searches[{i}]")
        kind, text = s.get("type"), s.get("query")
        if kind not in SEARCH_TYPES:
            raise RequestError(f"`searches[{i}].type`: unknown variant type {_show(kind)}; use one of "
                               f"{list(SEARCH_TYPES)}", field=f"searches[{i}].type")
        if not isinstance(text, str) or not text.strip():
            raise RequestError(f"`searches[{i}].query`: search query must be a non-empty string, got "
                               f"{_show(text)}", field=f"searches[{i}].query")
        out.append(SubQuery(cast(SearchType, kind), text))
    return tuple(out)


def _whole(value: object, field: str, most: int, message: str) -> int:
    """`value` as a whole number from 1 to `most` (2.0 is 2), else RequestError(message with the value shown)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise RequestError(message.format(_show(value)), field=field)
    return value


def _collections(names: object, most: int) -> tuple[str, ...]:
    if names is None:
        return ()
    if not isinstance(names, list) or not names:
        raise RequestError(f"`collections` must be a non-empty list of collection names, got {_show(names)}")
    if len(names) > most:
        raise RequestError(f"`collections` names {len(names)} collections; at most {most} "
                           "(serve.max_collections) are searched in one request: split it", field="collections")
    for name in names:
        if not isinstance(name, str) or not COLLECTION_NAME.fullmatch(name):
            raise RequestError(f"`collections`: {_show(name)} is not a collection name ({COLLECTION_RULE})",
                               field="collections")
    if len(set(names)) < len(names):
        twice = next(x for i, x in enumerate(names) if x in names[:i])
        raise RequestError(f"`collections` names {twice!r} more than once; name each collection once "
                           "(a page would come back at several ranks)", field="collections")
    return tuple(names)


def check_collection(name: object) -> str:
    """`name` when it is a collection name (COLLECTION_NAME), else RequestError saying what is allowed."""
    if not isinstance(name, str) or not COLLECTION_NAME.fullmatch(name):
        raise RequestError(f"{_show(name)} is not a collection name ({COLLECTION_RULE})", field="collection")
    return name


def check_sections(value: object, cap: int) -> int:
    """`sections` (--sections N) as a count: None -> 0 (off); else a whole number from 1 to `cap`
    (retrieve.max_sections), or RequestError naming the field, what was given and what is allowed."""
    if value is None:
        return 0
    return _whole(value, "sections", cap, f"`sections` must be a whole number from 1 to {cap} "
                  "(retrieve.max_sections; leave it out for pages only), got {}")


def check_min_score(value: object) -> float:
    """`min_score` as a float from 0 to 1 (scores are in [0, 1]: more returns nothing, NaN keeps nothing), or
    RequestError naming the field, what was given and what is allowed."""
    if (not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value)
            or not 0.0 <= float(value) <= 1.0):
        raise RequestError(f"`min_score` must be a number from 0 to 1 (scores are in [0, 1]; 0 keeps every page), "
                           f"got {_show(value)}", field="min_score")
    return float(value)


def _encodable(value: object) -> bool:
    """True unless a string in `value` (or in its lists and objects) cannot be written as UTF-8."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, list):
        return all(_encodable(v) for v in value)
    if isinstance(value, dict):
        return all(_encodable(k) and _encodable(v) for k, v in value.items())
    return True


def _show(value: object) -> str:
    """A value for an error message, as JSON, cut at 60 characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:60] + "..."
