"""Exact re-scoring of a vector index's candidates from the version's vectors file.

Above `index.exact_search_rows` LanceDB's vector index answers (IVF_HNSW_SQ). Its own re-ranking
(`refine_factor`) reads each candidate's full vector from the table, ~2/3 of the search's CPU at 400,000 rows.
On a local index the same full vectors are already memory-mapped from the version's vectors file
(fanout/store/vectors_file.py, written by `fanout index`), so here the index returns `index.ann_rescore` x k
candidates by its quantised distances and their cosines are computed exactly from that file: more candidates
for less CPU (docs/performance.md#query-cost-at-scale). Rows added after the index was built come back from
Lance's flat search of them like any other candidate; a prefilter is Lance's, applied before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from fanout.store import exact_vectors, vector_topk, vectors_file

if TYPE_CHECKING:
    from lance import LanceDataset

    from fanout.config import Config, IndexConfig


def usable(ds: LanceDataset, cfg: Config | None) -> bool:
    """Whether the config asks for re-scoring and the index is local (whether this version's vectors file is
    there: `has_file`); else Lance's `refine_factor` re-ranks, as on an object store."""
    return bool(cfg is not None and cfg.index.ann_rescore and cfg.index.exact_vectors_file
                and vectors_file.folder(ds) is not None)


def has_file(ds: LanceDataset) -> bool:
    """Whether the version's vectors file is there (mapped now: `rescore` reads it next)."""
    return exact_vectors.matrix(ds, files=True, load=False) is not None


def nearest_k(k: int, icfg: IndexConfig) -> int:
    """Candidates to ask the index for, per query vector (`icfg`: the config's `index` section)."""
    return k * max(1, icfg.ann_rescore)


def rescore(ds: LanceDataset, queries: np.ndarray, res: pa.Table, k: int) -> pa.Table | None:
    """Lance's candidate table (`query_index`, `_rowid`, the selected columns, `_distance`) cut to each query
    vector's k best by exact cosine distance from the vectors file, best first per query, equal scores in row
    order; `_rowid` dropped. None when the version has no vectors file (the caller asks Lance to refine)."""
    m = exact_vectors.matrix(ds, files=True, load=False)
    if m is None:
        return None
    res = res.sort_by([("query_index", "ascending"), ("_rowid", "ascending")])  # ties: row order
    qi = res["query_index"].to_numpy().astype(np.int64)
    rid = res["_rowid"].to_numpy().astype(np.int64)
    pos = np.searchsorted(m.ids, rid)
    found = (pos < len(m.ids)) & (m.ids[np.minimum(pos, len(m.ids) - 1)] == rid)
    if not found.all():  # the file is of the pinned version: every row is there
        return None
    q: np.ndarray = np.asarray(queries, np.float32)
    qn = np.linalg.norm(q, axis=1)
    q = q / np.where(qn > 0, qn, 1.0)[:, None]
    rows = m.position_rows(pos)  # (a delta version's stacked rows)
    sim = vector_topk.pair_cosines(vector_topk.stacked(m), rows, q.astype(np.float32), qi)  # alike in any batch,
    sim[m.damaged[rows]] = -np.inf  # never served                                          # on any CPU
    out: tuple[list, list, list] = ([], [], [])
    order = np.arange(len(pos))
    vector_topk.keep_best(qi, order, sim, k, 0, qn, None, out)  # positions here: rows of `res`
    _, take, dist = (np.concatenate(x) for x in out)
    picked = res.take(pa.array(take, pa.int64())).drop_columns(["_rowid"])
    at = picked.column_names.index("_distance")
    return picked.set_column(at, "_distance", pa.array(dist, pa.float32()))
