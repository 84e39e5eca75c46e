"""The Arrow schemas that pass between stages: the only shared contract.

Engine columns start with `_` (`_score`, `_rank`, `_distance`).
"""

from __future__ import annotations

import pyarrow as pa

NOTES = pa.schema([
    ("path", pa.string()),  # relative to the vault, POSIX separators, NFC
    ("title", pa.string()),  # H1 if present, else the file name without .md
    ("aliases", pa.list_(pa.string())),
    ("tags", pa.list_(pa.string())),
    ("description", pa.string()),
    ("lang", pa.string()),
    ("body", pa.string()),  # text after the front matter
    ("body_offset", pa.int64()),  # character offset of body within the file text
    ("content_hash", pa.string()),  # sha256 of the file bytes
    ("mtime", pa.float64()),
    ("props", pa.list_(pa.string())),  # front matter as casefolded `key` / `key=value` (fanout/filters.py)
    ("inline_tags", pa.list_(pa.string())),  # `#tag` words in the body
])

SKIPPED = pa.schema([("path", pa.string()), ("reason", pa.string()), ("detail", pa.string())])

CHUNKS = pa.schema([
    ("chunk_id", pa.string()),  # "<path>#<ordinal>"
    ("path", pa.string()),
    ("ordinal", pa.int32()),
    ("title", pa.string()),
    ("heading", pa.string()),  # heading path "H2 > H3"
    ("lang", pa.string()),
    ("start", pa.int64()),  # character offsets within the file text
    ("end", pa.int64()),
    ("text", pa.string()),  # the chunk's raw markdown
    ("embed_text", pa.string()),  # breadcrumb + text, what the embedder sees
])

DOCUMENTS = pa.schema([
    ("path", pa.string()),
    ("title", pa.string()),
    ("aliases", pa.list_(pa.string())),
    ("lang", pa.string()),
    ("content_hash", pa.string()),
    ("mtime", pa.float64()),
    ("n_chunks", pa.int32()),
    ("tags", pa.list_(pa.string())),  # filter values (fanout/filters.py): casefolded, nested tags + parents
    ("props", pa.list_(pa.string())),  # casefolded `key` / `key=value` of the front matter
])

QUERIES = pa.schema([
    ("qid", pa.string()),
    ("query", pa.string()),
    ("intent", pa.string()),
    ("variants", pa.list_(pa.struct([("kind", pa.string()), ("text", pa.string())]))),
])

ERRORS = pa.schema([("qid", pa.string()), ("field", pa.string()), ("error", pa.string())])

VARIANTS = pa.schema([
    ("qid", pa.string()),
    ("vid", pa.int32()),  # 0 = the original query
    ("kind", pa.string()),  # one of VARIANT_KINDS
    ("text", pa.string()),
    ("source", pa.string()),  # query | agent | cache | model | fallback
])

HITS = pa.schema([
    ("qid", pa.string()),
    ("vid", pa.int32()),
    ("kind", pa.string()),
    ("lane", pa.string()),  # one of LANE_KINDS
    ("path", pa.string()),
    ("chunk_id", pa.string()),
    ("_rank", pa.int32()),  # 1-based, page level within the list
    ("_score", pa.float64()),
])

FUSED = pa.schema([
    ("qid", pa.string()),
    ("path", pa.string()),
    ("chunk_id", pa.string()),  # the page's best chunk
    ("_rrf", pa.float64()),
    ("_norm", pa.float64()),  # _rrf / the best score any page could reach for this query
    ("_rank", pa.int32()),
])

RESULTS = pa.schema([
    ("qid", pa.string()),
    ("rank", pa.int32()),
    ("path", pa.string()),
    ("title", pa.string()),
    ("heading", pa.string()),
    ("snippet", pa.string()),
    ("score", pa.float64()),
    ("_rrf", pa.float64()),
    ("_rerank", pa.float64()),
    ("_explain", pa.string()),  # JSON: every list's rank and score for this page
])


# -- one row per query: the table that flows through the search stages ------------------------------------
# The input rows: `_row` (1-based position in the input, stable across resumes), `id` (given, or `row-<n>`),
# `raw` (the row as JSON text, parsed by ParseQueries in the worker), `_error` (a line the reader could not
# parse), `_dup` (the first row holding the same id, when this row repeats it).
INPUT_ROWS = pa.schema([("_row", pa.int64()), ("id", pa.string()), ("raw", pa.string()),
                        ("_error", pa.string()), ("_dup", pa.int64())])

VARIANT = pa.struct([("vid", pa.int32()), ("kind", pa.string()), ("text", pa.string()), ("source", pa.string())])
PAGE = pa.struct([("path", pa.string()), ("chunk_id", pa.string()), ("_score", pa.float64())])
HIT = pa.struct([(f.name, f.type) for f in HITS if f.name != "qid"])
QVEC = pa.struct([("vid", pa.int32()), ("vector", pa.list_(pa.float32()))])
# a column on the texts a search sends the embedder: the search's embedder.query_batch_size, texts per embed()
# call (0: the embedder's batch_size; actors/embedder.py)
QUERY_TEXTS = "_query_batch"
CANDIDATE = pa.struct([("path", pa.string()), ("chunk_id", pa.string()), ("title", pa.string()),
                       ("heading", pa.string()), ("snippet", pa.string()), ("passage", pa.string()),
                       ("_rrf", pa.float64()), ("_norm", pa.float64()), ("_rank", pa.int32()),
                       ("score", pa.float64()), ("_rerank", pa.float64())])
RESULT = pa.struct([(f.name, f.type) for f in RESULTS if f.name != "qid"])
# --sections N (pipelines/pick_sections.py): a page's best sections; the results gain a `sections` list only
# when asked for, so the page rows stay what they were without it
SECTION = pa.struct([("heading", pa.string()), ("line_from", pa.int32()), ("line_to", pa.int32()),
                     ("score", pa.float64()), ("snippet", pa.string()), ("ref", pa.string())])
RESULTS_SECTIONS = RESULTS.append(pa.field("sections", pa.list_(SECTION)))
RESULT_SECTIONS = pa.struct([(f.name, f.type) for f in RESULTS_SECTIONS if f.name != "qid"])

# what the last stage leaves per query (the parts a batch job writes)
ANSWERS = pa.schema([
    ("_row", pa.int64()), ("qid", pa.string()), ("query", pa.string()), ("error", pa.string()),
    ("field", pa.string()), ("expansion", pa.string()),  # agent | cache | model | fallback | probe_skip | none
    ("variants", pa.list_(VARIANT)), ("results", pa.list_(RESULT)),
])
ANSWERS_SECTIONS = ANSWERS.set(ANSWERS.get_field_index("results"), pa.field("results", pa.list_(RESULT_SECTIONS)))

# Routing (qmd): which variant kinds each lane searches. lex -> full text only; vec/hyde -> vectors only; the
# original query -> both; the exact title/alias lane takes the original and lex. One place, read by
# retrieval (what is searched) and fusion (what a query was sent to).
LANE_KINDS: dict[str, tuple[str, ...]] = {"fts": ("orig", "lex"), "vec": ("orig", "vec", "hyde"),
                                          "alias": ("orig", "lex")}
VECTOR_LANES = ("vec",)  # the lanes that search with a query vector


# batch columns that pass between stages (engine columns start with `_`)
CARRY = "_carry"  # a Ray Data caller's own columns, as one struct, carried from WrapRows to UnwrapAnswers
WHERE = "_where"  # each query's LanceDB prefilter (null: none), set by ProbeBM25, read by the retrieval lanes
PROBE_SEEN = "_probe_seen"  # the probe's normalised top score and gap, for --explain


def set_column(batch: pa.Table, name: str, arr: pa.Array | pa.ChunkedArray) -> pa.Table:
    """`batch` with column `name` replaced by `arr`, or appended when absent."""
    if name in batch.column_names:
        return batch.set_column(batch.schema.get_field_index(name), name, arr)
    return batch.append_column(name, arr)
