"""YAML from untrusted files (note front matter, `--config` files) in bounded memory and time.

`yaml.safe_load` builds Python objects only, but it still expands anchors and aliases: a few hundred bytes
of nested aliases (a "billion laughs") become billions of values as soon as anything walks or prints them,
and a few hundred levels of nesting exhaust Python's recursion limit. `load_bounded` composes the document
with a loader that counts, as it goes, the size every node would have with each alias expanded (an alias
adds the size of the node it repeats, without copying it), and the nesting depth; either one over its
limit raises `YAMLLimitError` naming the line, before anything is expanded. Benign anchors (`<<: *defaults`)
still load. A recursive alias (a node that contains itself) is refused.
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


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream: str, max_depth: int, max_size: int):
        super().__init__(stream)
        self.max_depth, self.max_size = max_depth, max_size
        self._depth = 0
        self._size = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its expanded size, once composed

    def _grow(self, n: int, mark: Any) -> None:
        self._size += n
        if self._size > self.max_size:
            raise YAMLLimitError(f"it is larger than {self.max_size} characters with its aliases (*name) "
                                 "expanded (a YAML alias bomb?)", mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)  # the anchored node itself, not a copy
            if id(node) not in self._sizes:
                raise YAMLLimitError("an alias (*name) refers to a node that contains it (a recursive "
                                     "structure)", mark, "recursive")
            self._grow(self._sizes[id(node)], mark)
            return node
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > self.max_depth:
            raise YAMLLimitError(f"it is nested deeper than {self.max_depth} levels", mark, "depth")
        before = self._size
        self._grow(1, mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.ScalarNode):
            self._grow(len(node.value), mark)
        self._sizes[id(node)] = self._size - before
        return node


def load_bounded(text: str, max_depth: int = DEFAULT_MAX_DEPTH, max_size: int = DEFAULT_MAX_SIZE) -> Any:
    """`yaml.safe_load(text)`, refusing (YAMLLimitError) what is nested over `max_depth` or, with its aliases
    expanded, larger than `max_size` characters. Other YAML errors are raised as `yaml.safe_load` raises them."""
    loader = _BoundedLoader(text, max_depth, max_size)
    try:
        return loader.get_single_data()
    except RecursionError:  # a depth limit above what the interpreter allows: still one clear error
        raise YAMLLimitError("it is nested too deeply to read", None, "depth") from None
    finally:
        loader.dispose()
