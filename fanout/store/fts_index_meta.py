"""Lance's full-text index of a column as the memory engine (fanout/store/fts_memory.py) reads it: the tokenizer's
parameters, the per-segment metadata and statistics that say whether the engine reproduces the index, cached per
table version (a version's indexes never change).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lance import LanceDataset

# index parameters that lance.tokenize takes (the rest of `index_statistics`' params describe the index)
TOKENIZE_ARGS = ("base_tokenizer", "language", "max_token_length", "lower_case", "stem", "remove_stop_words",
                  "custom_stop_words", "ascii_folding", "min_ngram_length", "max_ngram_length", "prefix_only",
                  "split_identifiers", "split_on_numerics", "preserve_original", "index_operators")


def updated_since(ds: LanceDataset, st: dict[str, Any]) -> bool:
    """Whether the full-text index of `ds` was built before rows were added or deleted (fanout updates it only
    now and then: pipelines/index.py): its counts then include rows gone and miss rows added, so they are not
    compared with the rows'."""
    if st.get("num_unindexed_rows"):
        return True
    return any(f.metadata.deletion_file is not None for f in ds.get_fragments())


_META: dict[tuple, Any] = {}  # (*version_key, column) -> index_meta's answer (the last few)
_META_LOCK = threading.Lock()


def index_meta(ds: LanceDataset, column: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | str:
    """(tokenize args, the index's per-segment metadata, its statistics) of `column`'s full-text index on `ds`,
    or why this engine does not reproduce it (a string). A version's indexes never change: kept for the last
    few (an index round asks for each column's several times)."""
    from fanout.store.version_files import version_key

    version = version_key(ds)
    if version is None:
        return _index_meta(ds, column)
    key = (*version, column)
    with _META_LOCK:
        if key in _META:
            return _META[key]
    got = _index_meta(ds, column)
    with _META_LOCK:
        _META[key] = got
        while len(_META) > 64:
            _META.pop(next(iter(_META)))
    return got


def _index_meta(ds: LanceDataset, column: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | str:
    name = next((d.name for d in ds.describe_indices()
                 if list(d.field_names) == [column] and "Inverted" in d.type_url), None)
    if name is None:
        return "no full-text index"
    st = ds.index_statistics(name)
    if st.get("num_segments") != 1 or len(st.get("indices", [])) != 1:
        return f"index layout {st.get('num_segments')} segments"
    meta = st["indices"][0]
    params = meta.get("params")
    if not isinstance(params, dict):  # Lance writes none for an index of no rows (every note deleted)
        return "index statistics without tokenizer parameters (an index of no rows)"
    if params.get("lance_tokenizer", "text") != "text":
        return f"tokenizer {params.get('lance_tokenizer')}"
    return {a: params[a] for a in TOKENIZE_ARGS if a in params}, meta, st
