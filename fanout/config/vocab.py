"""Names shared by the config, the schemas and the faces, in a leaf module (it imports nothing of fanout):
the agent fields and the variant kind each one becomes, the expander's output formats, the language codes."""

from __future__ import annotations

FIELD_KINDS: dict[str, str] = {"short_query": "lex", "rephrased_query": "vec", "expected_answer": "hyde"}
SEARCH_TYPES = ("lex", "vec", "hyde")  # qmd's `searches: [{type, query}]`: the kinds a sub-query may name
MAX_SEARCHES = 10  # sub-queries one row may give in `searches`
EXPAND_FORMATS = ("qmd", "fields")  # expand.format: qmd lex/vec/hyde lines, or the agent fields above
LANG_NAMES = {"en": "English", "ru": "Russian", "de": "German", "fr": "French", "es": "Spanish",
              "it": "Italian", "pt": "Portuguese"}
