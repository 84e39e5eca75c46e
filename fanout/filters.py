"""Search filters: folder / path prefix, tag, front-matter property, language -> a LanceDB `where` prefilter.

A filter is a dict of kinds to lists of values, e.g. `{"folder": ["Plugins"], "tag": ["guide"],
"property": ["status=done"], "lang": ["en"]}`. Values of one kind are alternatives (any of them); kinds
are all required; properties with different keys are all required, values of one key are alternatives.
Where a query row carries a `filter` and the caller gave one for every row (`fanout batch --tag x`), both
apply.

The chunks table holds what the prefilter reads (written at index time, `note_filter_values`): `path`,
`lang`, `tags` (casefolded, without `#`, front matter and inline tags, each nested tag also as its parents:
`a/b` -> `a/b`, `a`) and `props` (casefolded `key` and `key=value` per front-matter property; a list value
gives one entry per item). An index written before these columns existed answers folder/path/lang filters
and says how to add the others.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata

from fanout.errors import FilterError

TYPE_CHECKING = False  # typing itself costs the warm client ~5 ms of import
if TYPE_CHECKING:
    from typing import Any

KINDS: dict[str, str] = {
    "folder": "a folder of the vault: notes under it (`Plugins` or `Plugins/Core`)",
    "path": "a path prefix (`Plugins/Da` matches `Plugins/Daily notes.md`)",
    "tag": "a tag, with or without `#`; a parent tag matches its nested tags (`project` matches `project/a`)",
    "property": "a front-matter property `key=value` (case-insensitive), or `key` for any value",
    "lang": "a language code of the notes (`en`, `ru`)",
}
FILTER_COLUMNS = ("tags", "props")  # chunks/documents columns the tag and property filters read
MAX_VALUES = 50  # per kind: a longer list is a mistake (pass a folder instead of every path)
# patterns as text: `re` compiles each on first use (the CLI's filter check skips the index-side ones)
_LANG = r"(?i)[a-z]{2,3}([-_][a-z0-9]{2,8})?"
_INLINE_TAG = r"(?<![\w#&/\\])#([^\s#.,;:!?()\[\]{}<>'\"`|*=+~^$%@\\]+)"
_FENCE = r"^[ \t]{0,3}(```+|~~~+)"


def _norm(s: str) -> str:
    return " ".join(unicodedata.normalize("NFC", s).split())


def norm_tag(t: str) -> str:
    return _norm(t).lstrip("#").casefold()


def _values(kind: str, value: object) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise FilterError(f"filter.{kind}", f"`filter.{kind}` must be a string or a list of strings, got "
                                            f"{type(value).__name__} {str(value)[:40]!r}")
    if len(value) > MAX_VALUES:
        raise FilterError(f"filter.{kind}", f"`filter.{kind}` has {len(value)} values, at most {MAX_VALUES} "
                                            f"are allowed; filter by a folder instead")
    out = []
    for v in value:
        v = _norm(v)
        if not v:
            raise FilterError(f"filter.{kind}", f"`filter.{kind}` has an empty value; give {KINDS[kind]}")
        out.append(v)
    return out


def _check_value(kind: str, v: str) -> str:
    """One normalised value of a kind, or FilterError with what is allowed."""
    if kind in ("folder", "path"):
        v = v.replace("\\", "/").removeprefix("./").lstrip("/")
        if kind == "folder":
            v = v.rstrip("/")
        if not v or ".." in v.split("/"):
            raise FilterError(f"filter.{kind}", f"`filter.{kind}` {v!r} is not a path inside the vault; give "
                                                f"{KINDS[kind]}")
        return v
    if kind == "tag":
        t = norm_tag(v)
        if not t or " " in t:
            raise FilterError("filter.tag", f"`filter.tag` {v!r} is not a tag; give one word such as "
                                            f"`project` or `#project/a`")
        return t
    if kind == "property":
        key, eq, val = v.partition("=")
        key, val = _norm(key).casefold(), _norm(val).casefold()
        if not key or (eq and not val):
            raise FilterError("filter.property", f"`filter.property` {v!r} is not `key=value`; write it as "
                                                 f"`status=done` (or `status` for any value)")
        return f"{key}={val}" if eq else key
    if not re.fullmatch(_LANG, v):
        raise FilterError("filter.lang", f"`filter.lang` {v!r} is not a language code; give one such as "
                                         f"`en` or `ru`")
    return v.casefold()


def parse_filter(value: object) -> dict[str, list[str]]:
    """A caller's filter (dict, or JSON text of one) -> {kind: [normalised values]} (kinds sorted)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):  # None or NaN (CSV/parquet null)
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        text = value
        try:
            value = json.loads(text)
        except ValueError:
            raise FilterError("filter", f"`filter` is not valid JSON: {text[:60]!r}; give an object such as "
                                        '{"folder": "Plugins", "tag": "guide"}') from None
    if not isinstance(value, dict):
        raise FilterError("filter", f"`filter` must be an object of {sorted(KINDS)}, got "
                                    f"{type(value).__name__}")
    odd = [k for k in value if not isinstance(k, str)]
    if odd:
        raise FilterError("filter", f"`filter` keys must be text, one of {sorted(KINDS)}; got "
                                    f"{type(odd[0]).__name__} {str(odd[0])[:40]!r}")
    out: dict[str, list[str]] = {}
    for kind in sorted(value):
        if kind not in KINDS:
            raise FilterError(f"filter.{kind}", f"unknown filter {kind!r}; use one of {sorted(KINDS)}")
        if value[kind] is None:
            continue
        vals = list(dict.fromkeys(_check_value(kind, v) for v in _values(kind, value[kind])))
        if vals:
            out[kind] = vals
    return out


def combine(*filters: dict[str, list[str]] | None) -> list[dict[str, list[str]]]:
    """Several filters that all apply (the job's and the row's), empty ones dropped."""
    return [f for f in filters if f]


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def where_sql(filters: list[dict[str, list[str]]]) -> str | None:
    """The LanceDB `where` of filters that all apply (None when there are none)."""
    clauses: list[str] = []
    for f in filters:
        for kind, vals in sorted(f.items()):
            if kind == "folder":
                alts = [f"starts_with(path, {_q(v + '/')})" for v in vals]
            elif kind == "path":
                alts = [f"starts_with(path, {_q(v)})" for v in vals]
            elif kind == "lang":
                alts = [f"lang IN ({', '.join(_q(v) for v in vals)})"]
            elif kind == "tag":
                alts = [f"array_has_any(tags, [{', '.join(_q(v) for v in vals)}])"]
            else:  # property: AND across keys, OR within one key
                by_key: dict[str, list[str]] = {}
                for v in vals:
                    by_key.setdefault(v.split("=", 1)[0], []).append(v)
                clauses += [f"array_has_any(props, [{', '.join(_q(v) for v in vs)}])" for vs in by_key.values()]
                continue
            clauses.append(alts[0] if len(alts) == 1 else "(" + " OR ".join(alts) + ")")
    return " AND ".join(clauses) if clauses else None


def needs_columns(filters: list[dict[str, list[str]]]) -> list[str]:
    """The chunks columns beyond path/lang that these filters read."""
    kinds = {k for f in filters for k in f}
    return [c for c, k in (("tags", "tag"), ("props", "property")) if k in kinds]


def describe(filters: list[dict[str, list[str]]]) -> str:
    """Readable form for explain output: `folder Plugins, tag guide`."""
    return "; ".join(", ".join(f"{k} {'|'.join(v)}" for k, v in sorted(f.items())) for f in filters)


# -- index side: the values a note contributes ------------------------------------------------------------


def inline_tags(body: str) -> list[str]:
    """`#tag` words in a note's text outside code fences and inline code (Obsidian's inline tags)."""
    out: list[str] = []
    fence = False
    for line in body.splitlines():
        if re.match(_FENCE, line):
            fence = not fence
            continue
        if fence or "#" not in line:
            continue
        line = re.sub(r"`[^`]*`", " ", line)
        for m in re.finditer(_INLINE_TAG, line):
            t = m.group(1).rstrip("/-_")
            if t and not t.replace("/", "").isdigit():
                out.append(t)
    return out


def tag_values(tags: list[str]) -> list[str]:
    """Casefolded tags, each nested one with its parents (`a/b/c` -> `a/b/c`, `a/b`, `a`)."""
    out: dict[str, None] = {}
    for t in tags:
        t = norm_tag(t)
        if not t:
            continue
        parts = [p for p in t.split("/") if p]
        for i in range(len(parts), 0, -1):
            out["/".join(parts[:i])] = None
    return list(out)


def _scalar(v: object) -> str | None:
    import datetime as _dt  # index side only: the CLI's filter check stays light

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return _norm(str(v)).casefold() or None
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()
    return None


def prop_values(meta: dict[str, Any]) -> list[str]:
    """`key` and `key=value` entries (casefolded) for a note's front matter; nested mappings give the key."""
    out: dict[str, None] = {}
    for k, v in meta.items():
        key = _norm(str(k)).casefold()
        if not key:
            continue
        out[key] = None
        for item in v if isinstance(v, (list, tuple)) else [v]:
            s = _scalar(item)
            if s is not None:
                out[f"{key}={s}"] = None
    return list(out)


def as_option(f: dict[str, list[str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A parsed filter as a hashable value (SearchOptions.filter)."""
    return tuple((k, tuple(v)) for k, v in sorted(f.items()) if v)
