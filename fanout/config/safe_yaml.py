"""YAML from untrusted files (note front matter, `--config` files) in bounded memory and time.

`yaml.safe_load` builds Python objects only, but it still expands anchors and aliases: a few hundred bytes
of nested aliases (a "billion laughs") become billions of values as soon as anything walks or prints them,
and a few hundred levels of nesting exhaust Python's recursion limit. `load_bounded` first walks the parser's
event stream, counting the size every node would have with each alias expanded (an alias adds the size of
the node it repeats; nothing is copied or built) and the nesting depth; either one over its limit raises
`YAMLLimitError` naming the line. Only then is the document built (libyaml's safe loader when present).
Benign anchors (`<<: *defaults`) still load. A recursive alias (a node that contains itself) is refused.
"""

from __future__ import annotations

from typing import Any

import yaml

DEFAULT_MAX_DEPTH = 32  # nesting levels (mappings and lists inside each other)
DEFAULT_MAX_SIZE = 1_000_000  # characters of scalars plus one per node, with every alias expanded


class YAMLLimitError(yaml.YAMLError):
    """The document is nested too deeply, too large once its aliases are expanded, or recursive."""

    def __init__(self, problem: str, mark: Any = None, kind: str = "size"):
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark
        self.kind = kind  # "depth", "size" or "recursive"

    def __str__(self) -> str:
        where = f" at line {self.problem_mark.line + 1}" if self.problem_mark is not None else ""
        return f"{self.problem}{where}"


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~5x faster on big front matter


def check_bounded(text: str, max_depth: int = DEFAULT_MAX_DEPTH, max_size: int = DEFAULT_MAX_SIZE) -> None:
    """Walk the YAML event stream once (nothing is built) and raise YAMLLimitError if the document nests over
    `max_depth` levels, holds over `max_size` characters with every alias counted as the node it repeats, or
    has an alias inside the node it names. Memory: one entry per open collection and per anchor."""
    sizes: dict[str, int] = {}  # anchor -> expanded size of the closed node it names
    open_anchors: set[str] = set()
    stack: list[list] = []  # [size so far, anchor] per open collection
    total = 0

    def add(n: int, mark: Any) -> None:
        nonlocal total
        total += n
        if total > max_size:
            raise YAMLLimitError(f"it is larger than {max_size} characters with its aliases (*name) expanded "
                                 "(a YAML alias bomb?)", mark)
        if stack:
            stack[-1][0] += n

    for ev in yaml.parse(text, Loader=_LOADER):
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) >= max_depth:
                raise YAMLLimitError(f"it is nested deeper than {max_depth} levels", ev.start_mark, "depth")
            add(1, ev.start_mark)
            stack.append([0, ev.anchor])
            if ev.anchor:
                open_anchors.add(ev.anchor)
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            size, anchor = stack.pop()
            if anchor:
                sizes[anchor] = size + 1
                open_anchors.discard(anchor)
            if stack:
                stack[-1][0] += size  # its own 1 was added to the parent when it opened
        elif isinstance(ev, yaml.ScalarEvent):
            n = 1 + len(ev.value)
            if ev.anchor:
                sizes[ev.anchor] = n
            add(n, ev.start_mark)
        elif isinstance(ev, yaml.AliasEvent):
            if ev.anchor in open_anchors:
                raise YAMLLimitError("an alias (*name) refers to a node that contains it (a recursive "
                                     "structure)", ev.start_mark, "recursive")
            add(sizes.get(ev.anchor or "", 0), ev.start_mark)  # an undefined alias: the loader names it below


def load_bounded(text: str, max_depth: int = DEFAULT_MAX_DEPTH, max_size: int = DEFAULT_MAX_SIZE) -> Any:
    """`yaml.safe_load(text)`, refusing (YAMLLimitError) what is nested over `max_depth` or, with its aliases
    expanded, larger than `max_size` characters (`check_bounded`, before anything is built). Other YAML
    errors are raised as `yaml.safe_load` raises them."""
    try:
        check_bounded(text, max_depth, max_size)
        return yaml.load(text, Loader=_LOADER)  # a safe loader: plain data only
    except RecursionError:  # a depth limit above what the interpreter allows: still one clear error
        raise YAMLLimitError("it is nested too deeply to read", None, "depth") from None
    except yaml.YAMLError as e:  # libyaml stops at 1000 levels of flow nesting on its own
        if isinstance(e, YAMLLimitError) or "nesting depth" not in str(getattr(e, "problem", "")):
            raise
        what = f"{max_depth} levels" if max_depth < 1000 else "the 1000 levels libyaml reads"
        raise YAMLLimitError(f"it is nested deeper than {what}", getattr(e, "problem_mark", None),
                             "depth") from None
