"""Text from notes made safe for where it is shown: a terminal, a spreadsheet (CSV), a markdown renderer.

Notes are not trusted (README "Threat model"): a title, heading, snippet or even a file name may hold
terminal control sequences (ESC/OSC/CSI: set the window title, write the clipboard with OSC 52, clear the
screen), a newline that forges an extra output line, a spreadsheet formula (`=HYPERLINK(...)`) or markdown
and HTML (`<img onerror=...>`, `<script>`, `javascript:` links, remote images). JSON and parquet output stay
exact; these functions serve the other outputs. Stdlib only: the warm CLI client imports it.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls (0x9b is a one-byte CSI), the Unicode line/paragraph separators and the bidi
# controls that reorder what a terminal shows ("Trojan Source"); each is shown as \xNN or \uNNNN
_OTHER_CONTROLS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ANY_CONTROL = re.compile(f"[\x00-\x1f{_OTHER_CONTROLS}]")
_CONTROL_BUT_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_OTHER_CONTROLS}]")  # tab and newline stay


def _escape(m: re.Match[str]) -> str:
    o = ord(m.group())
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def for_terminal(text: object, keep_lines: bool = False) -> str:
    """`text` with every control character shown as `\\xNN` (`\\uNNNN`), so nothing in it acts on a terminal
    and a name holds no line break. `keep_lines`: newlines and tabs stay (a note's body, a section)."""
    s = "" if text is None else str(text)
    if keep_lines:
        return _CONTROL_BUT_LINES.sub(_escape, s.replace("\r\n", "\n"))
    return _ANY_CONTROL.sub(_escape, s)


# -- CSV: OWASP "CSV injection" --------------------------------------------------------------------------
CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may read as the start of a formula
CSV_QUOTE = "'"


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text: a string starting with = + - @ tab or CR gets a leading `'`
    (OWASP's advice). One that already looks escaped (`'` then one of those or `'`) gets one too, so the
    escape reverses exactly (`csv_uncell`); anything else, and every non-string value, is unchanged."""
    if isinstance(value, str) and value[:1] and (value[0] in CSV_FORMULA_START or (
            value[0] == CSV_QUOTE and value[1:2] != "" and value[1] in (*CSV_FORMULA_START, CSV_QUOTE))):
        return CSV_QUOTE + value
    return value


def csv_uncell(value: object) -> object:
    """The value `csv_cell` was given (fanout reading its own CSV back: `fanout gaps`, `fanout analyze`)."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == CSV_QUOTE and \
            (value[1] in CSV_FORMULA_START or value[1] == CSV_QUOTE):
        return value[1:]
    return value


# the same rule as regular expressions (RE2 and duckdb), for whole Arrow columns and SQL views
CSV_CELL_RE = "^([=+\\-@\t\r]|'[=+\\-@\t\r'])"
CSV_UNCELL_RE = "^'([=+\\-@\t\r'])"


# -- markdown ------------------------------------------------------------------------------------------------
_MD_SPECIAL = re.compile(r"([\\`\[\]<!&])")
_MD_SPECIAL_CELL = re.compile(r"([\\`\[\]<!&|])")


def md_text(text: object, table: bool = True) -> str:
    """Note text as literal markdown text on one line (a table cell, a list item): control characters and
    newlines shown as `\\xNN`; backslash, backtick, `[ ] < ! &` (and `|` in a table cell) backslash-escaped,
    so no HTML (`<script>`, `<img onerror>`), autolink, link, image (remote or `javascript:`), entity, code
    span or extra table cell starts. Emphasis characters stay: they only style text."""
    return (_MD_SPECIAL_CELL if table else _MD_SPECIAL).sub(r"\\\1", for_terminal(text))


def md_code(text: object, table: bool = True) -> str:
    """Text as one markdown code span that nothing in it can close: the fence is one backtick longer than
    the longest run of backticks inside (CommonMark); control characters and newlines are shown as `\\xNN`;
    `table`: `|` escaped (GFM reads a table cell's `\\|` as `|`, even in a code span)."""
    s = for_terminal(text)
    s = s.replace("|", "\\|") if table else s
    longest = max((len(run) for run in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ") and s.strip()) else ""
    return f"{fence}{pad}{s}{pad}{fence}"
