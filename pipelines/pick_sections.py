"""Stage (only with `--sections N`): the N best sections of each returned page, as `_sections`.

A section is a run of consecutive chunks of one note with the same heading path (the chunker cuts a long
section into several chunks; they are one section here). Each carries its heading path, its file lines
(`line_from`-`line_to`, 1-based, as an editor shows them), a score, a snippet and `ref`, the reference
`fanout get` reads it back with (`path:FROM-TO`, exactly those lines).

The score, a rule fixed before any section judgment was read (docs/benchmark.md#sections):
- every list the page fusion read (fuse_rrf: the same hits, the same list weights `w / (k + rank)`) names
  one chunk of each page it holds (its best chunk there); that chunk's section earns the list's contribution;
  a section's share is its contributions over the page's total, in [0, 1];
- when the reranker scored the page, it scored one chunk's passage (the page's best chunk): that section's
  score is (share + rerank) / 2, every other section's share / 2;
- sections no list named score 0 and come after, ordered by how many distinct query terms they hold, then
  by their order in the note.
Ties keep the note's order. Page ranking is untouched: this stage only adds a column.

Line numbers come from the note's text in the vault (the chunk table holds character offsets): the note is
read through the same guarded reader the index uses, only when the page is returned. When the note is gone,
unreadable or changed since indexing (its text at the offsets is not the chunk's), the section has no lines
and `ref` names its heading instead (`path#Heading > Sub`); re-indexing restores the lines.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from pathlib import Path

import pyarrow as pa
from fanout.pipelines.fuse_rrf import list_weight
from fanout.pipelines.passages import query_keys, snippet

from fanout.config import Config
from fanout.config.sections import RetrieveConfig
from fanout.io.vault import read_regular
from fanout.schemas import SECTION, set_column
from fanout.store.db import Collection, pin_batch
from fanout.text import stem_key, terms

CACHE_PAGES = 1024  # pages whose chunks a retrieval process keeps per index version (a few MB)
SECTIONS_COLUMN = "_sections"  # per query, per candidate: its sections (empty past the top n)


def _lines_of(text: str, start: int, end: int) -> tuple[int, int]:
    """(first, last) 1-based file line of text[start:end], blank space at either end left out (as the chunk's
    own text is stripped)."""
    seg = text[start:end]
    stop = start + len(seg.rstrip())
    start += len(seg) - len(seg.lstrip())
    stop = max(stop, start + 1)
    return text.count("\n", 0, start) + 1, text.count("\n", 0, stop - 1) + 1


def _stems(chunk: dict) -> frozenset[str]:
    """The chunk's query-term stems, computed once per cached chunk row."""
    if "_stems" not in chunk:
        chunk["_stems"] = frozenset(stem_key(t) for t in terms(chunk["text"]))
    return chunk["_stems"]


def group_sections(chunks: list[dict]) -> list[dict]:
    """A page's chunks (ordinal order) -> sections: consecutive chunks with the same heading, merged."""
    out: list[dict] = []
    for c in chunks:
        if out and out[-1]["heading"] == c["heading"]:
            s = out[-1]
            s["chunk_ids"].append(c["chunk_id"])
            s["start"], s["end"] = min(s["start"], c["start"]), max(s["end"], c["end"])
            s["texts"].append(c["text"])
            s["spans"].append((c["start"], c["end"], c["text"]))
            s["chunks"].append(c)
        else:
            out.append({"heading": c["heading"] or "", "chunk_ids": [c["chunk_id"]], "start": c["start"],
                        "end": c["end"], "texts": [c["text"]], "spans": [(c["start"], c["end"], c["text"])],
                        "chunks": [c], "order": len(out)})
    return out


def rank_sections(secs: list[dict], contrib: dict[str, float], keys: set[str], reranked: tuple[str, float] | None,
                  want: int) -> list[dict]:
    """The best `want` of `secs`, with `score`, best first (the module's rule). Query terms are counted only
    when sections no list named are needed to fill `want`."""
    total = sum(contrib.get(c, 0.0) for s in secs for c in s["chunk_ids"])  # this page's lists only
    for s in secs:
        raw = sum(contrib.get(c, 0.0) for c in s["chunk_ids"])
        share = raw / total if total > 0 else 0.0
        if reranked is not None:
            share = (share + (reranked[1] if reranked[0] in s["chunk_ids"] else 0.0)) / 2
        s["score"] = share
    seen = sorted((s for s in secs if s["score"] > 0), key=lambda s: (-s["score"], s["order"]))
    if len(seen) >= want:
        return seen[:want]
    rest = [s for s in secs if s["score"] <= 0]
    for s in rest:
        s["_terms"] = len(keys & set().union(*(_stems(c) for c in s["chunks"]))) if keys else 0
    return seen + sorted(rest, key=lambda s: (-s["_terms"], s["order"]))[:want - len(seen)]


class PickSections:
    """Stage: `candidates` + `_hits` -> `_sections` (one list per candidate: the top `sections` sections of
    each of the first `n` candidates scoring at least `min_score`, the pages FormatResults keeps)."""

    def __init__(self, cfg: Config, db: str, collection: str, sections: int, n: int, min_score: float = 0.0):
        self.cfg = cfg
        self.col = Collection(db, collection, cfg)
        self.sections, self.n, self.min_score = sections, n, min_score
        self.stats: dict[str, int] = {"pages": 0, "notes_read": 0, "no_lines": 0}

    def vault(self) -> Path | None:
        v = self.col.read_manifest().get("vault")
        return Path(v).resolve() if v else None

    def note_text(self, vault: Path | None, rel: str) -> str | None:
        """The note's file text (as the index read it: BOM dropped), or None when it cannot be read."""
        if vault is None:
            return None
        target = (vault / rel)
        try:
            if not target.resolve().is_relative_to(vault):
                return None
            raw, _ = read_regular(target, int(self.cfg.index.max_note_mb * 1e6), str(vault))
            self.stats["notes_read"] += 1
            return raw.decode("utf-8").lstrip("\ufeff")
        except (OSError, ValueError):
            return None

    def page_chunks(self, paths: list[str]) -> dict[str, list[dict]]:
        """path -> its chunks in note order, one read for the pages not read before at this index version
        (kept per version, at most CACHE_PAGES pages: a server asked about the same pages again reads none)."""
        cache: OrderedDict[str, list[dict]] = self.col.memo("section_chunks", OrderedDict)
        todo = sorted(set(paths) - set(cache))
        if todo:
            where = "path IN (" + ", ".join("'" + p.replace("'", "''") + "'" for p in todo) + ")"
            rows = self.col.read(self.col.chunks_name, ["chunk_id", "path", "ordinal", "heading", "start", "end",
                                                        "text"], where).to_pylist()
            got: dict[str, list[dict]] = defaultdict(list)
            for r in sorted(rows, key=lambda r: (r["path"], r["ordinal"])):
                got[r["path"]].append(r)
            for p in todo:
                cache[p] = got.get(p, [])
        out = {}
        for p in set(paths):
            cache.move_to_end(p)
            out[p] = cache[p]
        while len(cache) > CACHE_PAGES:
            cache.popitem(last=False)
        return out

    def __call__(self, batch: pa.Table) -> pa.Table:
        pin_batch(self.col, batch)  # the index version the batch's retrieval read
        cands = batch.column("candidates").to_pylist()
        hits = batch.column("_hits").to_pylist() if "_hits" in batch.column_names else [None] * batch.num_rows
        queries = batch.column("query").to_pylist()
        variants = batch.column("variants").to_pylist()
        kept: list[list[int]] = []  # per query: the candidate positions FormatResults keeps
        for cs in cands:
            idx: list[int] = []
            for i, c in enumerate(cs or []):
                if len(idx) < self.n and c["score"] >= self.min_score:
                    idx.append(i)
            kept.append(idx)
        chunks = self.page_chunks([cands[q][i]["path"] for q, idx in enumerate(kept) for i in idx])
        vault = self.vault() if chunks else None
        texts: dict[str, str | None] = {}
        fc, rc = self.cfg.fuse, self.cfg.retrieve
        out: list[list[list[dict]] | None] = []
        for q, cs in enumerate(cands):
            if cs is None:
                out.append(None)
                continue
            contrib: dict[str, float] = defaultdict(float)
            for h in hits[q] or []:
                contrib[h["chunk_id"]] += list_weight(h["kind"], h["lane"], fc) / (fc.k + h["_rank"])
            lex = [v["text"] for v in variants[q] or [] if v["kind"] == "lex"]
            keys = query_keys(queries[q], *lex)
            per: list[list[dict]] = [[] for _ in cs]
            for i in kept[q]:
                c = cs[i]
                path = c["path"]
                if path not in texts:
                    texts[path] = self.note_text(vault, path)
                secs = group_sections(chunks.get(path, []))
                rr = (c["chunk_id"], float(c["_rerank"])) if c.get("_rerank") is not None else None
                per[i] = [self.section(s, path, texts[path], keys, rc)
                          for s in rank_sections(secs, contrib, keys, rr, self.sections)]
                self.stats["pages"] += 1
            out.append(per)
        return set_column(batch, SECTIONS_COLUMN, pa.array(out, pa.list_(pa.list_(SECTION))))

    def section(self, s: dict, path: str, text: str | None, keys: set[str], rc: RetrieveConfig) -> dict:
        """One section as SECTION: lines and `ref` when the note's text still holds its chunks at their offsets."""
        lines = None
        if text is not None and all(text[a:b].strip() == t.strip() for a, b, t in s["spans"]):
            lines = _lines_of(text, s["start"], s["end"])
        body = text[s["start"]:s["end"]] if lines and text is not None else "\n".join(s["texts"])
        if lines is None:
            self.stats["no_lines"] += 1
        ref = f"{path}:{lines[0]}-{lines[1]}" if lines else (f"{path}#{s['heading']}" if s["heading"] else path)
        return {"heading": s["heading"], "line_from": lines[0] if lines else None,
                "line_to": lines[1] if lines else None, "score": round(s["score"], 4),
                "snippet": snippet(body, keys, rc.snippet_tokens, rc.snippet_chars), "ref": ref}
