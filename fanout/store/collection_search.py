"""A collection's batched searches (`Collection.fts_search_many`, `vector_search_many`): on the pinned chunks
version, full text through fanout/store/fts.py, vectors exact (fanout/store/exact_vectors.py) up to
`index.exact_search_rows` rows, else through Lance's vector index. Query vectors are cut to the searched dimension
here."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from fanout.store import ann_rescore
from fanout.store.vectors import VECTOR, has_vector_index, truncate_vectors, vector_dims

if TYPE_CHECKING:
    from fanout.config import Config

log = logging.getLogger(__name__)


class Searches:
    """`Collection`'s search methods (over its pinned tables: `dataset`, `guard`, `memo`)."""

    cfg: Config | None
    db_dir: str

    @property
    def chunks_name(self) -> str:  # (Collection's)
        raise NotImplementedError

    def dataset(self, name: str):  # (Collection's)
        raise NotImplementedError

    def guard(self, name: str):  # (Collection's)
        raise NotImplementedError

    def memo(self, key: Hashable, build):  # (Collection's)
        raise NotImplementedError

    def hint(self) -> str:  # (Collection's)
        raise NotImplementedError

    def fts_search_many(self, queries: list[str], columns: list[str], boosts: list[float], k: int,
                        select: list[str], wheres: list[str | None] | None = None) -> list[pa.Table]:
        """One full-text search per query (`select` + `_score` each) on the pinned chunks version; `wheres[i]`
        is query i's prefilter (fanout/filters.py). The engines (in memory, or Lance): fanout/store/fts.py."""
        from fanout.store import fts

        if not queries:  # no dataset opened for nothing (a warm interactive query pays ~25 ms for one)
            return []
        with self.guard(self.chunks_name):
            keys = self.row_keys(tuple(select)) if set(select) <= {"path", "chunk_id"} else None
            return fts.search_many(self.dataset(self.chunks_name), queries, columns, boosts, k, select, wheres,
                                   keys, self.cfg.retrieve if self.cfg is not None else None)

    def row_keys(self, columns: tuple[str, ...]) -> tuple[np.ndarray, pa.Table] | None:
        """The pinned chunks version's `columns` in `_rowid` order with its sorted row ids (memo; None above
        `retrieve.rowid_map_rows` rows). A full-text call that asks for `_rowid` only and takes these columns
        from memory costs ~1.9 ms of CPU instead of ~3.0 (the per-call read of the columns from the data
        files; bench/query_cost.py)."""
        limit = self.cfg.retrieve.rowid_map_rows if self.cfg is not None else 0

        def build():
            ds = self.dataset(self.chunks_name)
            if not limit or ds.count_rows() > limit:
                return None
            t = ds.to_table(columns=list(columns), with_row_id=True)
            ids = t["_rowid"].to_numpy()
            order = np.argsort(ids, kind="stable")
            return ids[order], t.select(list(columns)).take(pa.array(order))

        with self.guard(self.chunks_name):
            return self.memo(("row_keys", columns), build)

    def vector_search_many(self, vectors: list[list[float]] | np.ndarray, k: int, select: list[str],
                           where: str | None = None) -> pa.Table:
        """All query vectors (lists, or the rows of a 2-D array) as ONE batched search; the result has
        `query_index`.

        Query vectors are cut to the stored dimension (Matryoshka) and re-normalised. Up to
        `index.exact_search_rows` rows the search is exact, one matrix product (`_exact_search`); above, with a
        vector index the config's `index.nprobes` / `index.refine_factor` / `index.ef` apply (rows added since
        the index was built are searched exactly as well). Non-finite query vectors get empty lists; stored
        vectors that are damaged (NaN distance) are logged and never served. `where` prefilters every query (fanout/filters.py).
        """
        import pyarrow.compute as pc

        if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
            finite = np.flatnonzero(np.isfinite(vectors).all(axis=1)).tolist()
        else:
            finite = [i for i, v in enumerate(vectors) if v is not None and np.isfinite(np.asarray(v)).all()]
        if len(finite) < len(vectors):
            log.warning("%d query vectors are not finite; their vector lists are empty", len(vectors) - len(finite))
        if not finite:
            return pa.table({"query_index": pa.array([], pa.int32())})
        with self.guard(self.chunks_name):
            ds = self.dataset(self.chunks_name)
            dim, indexed = self.memo("vector_meta", lambda: (vector_dims(ds)[0], has_vector_index(ds)))
            if isinstance(vectors, np.ndarray) and vectors.ndim == 2:
                qv = np.asarray(vectors if len(finite) == len(vectors) else vectors[finite], np.float32)
            else:
                qv = np.asarray([vectors[i] for i in finite], dtype=np.float32)
            qv = truncate_vectors(qv, dim)
            res = self._exact_search(ds, qv, k, select, where)  # None: above the size, or Lance must answer
            cols = [c for c in select if c != "_distance"] + ["_distance"]
            # the index's candidates re-scored exactly from the vectors file instead of Lance's refine
            if res is None and indexed and ann_rescore.usable(ds, self.cfg) and \
                    self.memo("ann_rescore_file", lambda: ann_rescore.has_file(ds)):
                got = ds.to_table(columns=cols, nearest=self._nearest(qv, k, indexed, rescore=True),
                                  filter=where or None, prefilter=True if where else None, with_row_id=True)
                res = ann_rescore.rescore(ds, qv, got, k)  # None: no vectors file after all (Lance refines)
            if res is None:
                res = ds.to_table(columns=cols, nearest=self._nearest(qv, k, indexed), filter=where or None,
                                  prefilter=True if where else None)
        if res.num_rows:  # Lance's batch search always gives `query_index` and (asked for) `_distance`
            ok = pc.fill_null(pc.is_finite(res["_distance"]), False)
            if not pc.all(ok).as_py():  # a stored vector is damaged (NaN/inf): never serve it
                bad = res.filter(pc.invert(ok))
                ids = sorted(set(bad["chunk_id"].to_pylist()))[:3] if "chunk_id" in bad.column_names else []
                log.error("table %s in %s has damaged vectors (e.g. %s), left out of the results; repair with "
                          "`fanout index` (it re-embeds damaged notes) or %s", self.chunks_name, self.db_dir,
                          ids, self.hint())
                res = res.filter(ok)
        if len(finite) < len(vectors):  # map back to the caller's positions
            back = pa.array(finite, pa.int32()).take(res["query_index"])
            res = res.set_column(res.column_names.index("query_index"), "query_index", back)
        return res

    def _nearest(self, qv: np.ndarray, k: int, indexed: bool, rescore: bool = False) -> dict[str, Any]:
        """Lance's batch search (one plan per query vector, `query_index` first), as lancedb runs it, with the
        config's index settings; `rescore`: `index.ann_rescore` x k candidates, no refine (fanout/store/
        ann_rescore.py re-scores them)."""
        nearest: dict[str, Any] = {"column": VECTOR, "q": qv, "k": k, "metric": "cosine"}
        icfg = self.cfg.index if self.cfg is not None else None
        if icfg is None or not indexed:
            return nearest
        nearest["minimum_nprobes"] = nearest["maximum_nprobes"] = icfg.nprobes  # lancedb's nprobes()
        candidates = ann_rescore.nearest_k(k, icfg) if rescore else k * max(1, icfg.refine_factor)
        if rescore:
            nearest["k"] = candidates
        elif icfg.refine_factor:
            nearest["refine_factor"] = icfg.refine_factor
        if icfg.ef:
            nearest["ef"] = max(icfg.ef, candidates)  # Lance: ef >= candidates
        return nearest

    def _exact_search(self, ds, qv: np.ndarray, k: int, select: list[str], where: str | None) -> pa.Table | None:
        """One matrix product over this process's copy of the pinned vectors (fanout/store/exact_vectors.py) while
        the table holds at most `index.exact_search_rows` rows, whether or not it has a vector index; None
        above that (LanceDB's index answers) or when Lance must evaluate the prefilter."""
        limit = self.cfg.index.exact_search_rows if self.cfg is not None else 0
        if not limit or self.memo("vector_rows", ds.count_rows) > limit:
            return None
        from fanout.store import exact_vectors

        cols = tuple(c for c in select if c not in ("_distance", "query_index"))
        got = exact_vectors.search(ds, qv, k, select, where, self.row_keys(cols) if cols else None,
                                   files=bool(self.cfg is not None and self.cfg.index.exact_vectors_file),
                                   threads=self.cfg.index.exact_threads if self.cfg is not None else 0)
        if got is None:
            return None
        res, damaged = got
        if damaged:
            log.error("table %s in %s has %d damaged vectors, left out of the results; repair with `fanout index` "
                      "(it re-embeds damaged notes) or %s", self.chunks_name, self.db_dir, damaged, self.hint())
        return res
