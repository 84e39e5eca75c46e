"""Stage: embed chunks with the Embedder actor(s); `embed_groups` runs it over groups of chunks through the
runner's one interface (`runner.run`): in-process one embedder call per group, on Ray one Dataset whose
embedder actor pool streams the groups back in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from fanout.config import Config
from fanout.exec.runner import Runner, StageSpec
from fanout.exec.stage_io import Source


def embed_chunks(chunks: pa.Table, runner: Runner) -> pa.Table:
    """CHUNKS -> CHUNKS + `vector`. Texts go out sorted by length so each actor batch is evenly sized."""
    if chunks.num_rows == 0:
        return chunks
    order = pa.compute.sort_indices(pa.compute.utf8_length(chunks["embed_text"]))
    batch = pa.table({
        "i": order,
        "text": chunks["embed_text"].take(order),
        "title": chunks["title"].take(order),
        "role": pa.array(["document"] * chunks.num_rows),
    })
    out = runner.map("embedder", batch)
    back = pa.compute.sort_indices(out["i"])
    return chunks.append_column("vector", out["vector"].take(back))


class EmbedChunks:
    """Model stage (Ray Data): CHUNKS rows (+ `_group`) -> + `vector`."""

    def __init__(self, cfg: Config, runner: Runner | None = None):
        self.runner = runner or Runner(cfg)

    def __call__(self, batch: pa.Table) -> pa.Table:
        return embed_chunks(batch, self.runner)


def embed_groups(groups: list[Any], runner: Runner, cfg: Config) -> Iterator[tuple[Any, pa.Table]]:
    """(key, chunks) groups -> (key, chunks + vector), in order, as one run of the EmbedChunks stage (each
    group one input table, kept whole: in-process that is one embedder call per group; on Ray every embedder
    actor is busy while the caller writes the groups that came back)."""
    if not groups:
        return
    tables = [c.append_column("_group", pa.array([g] * c.num_rows, pa.int64()))
              for g, (_, c) in enumerate(groups) if c.num_rows]
    keys = [k for k, _ in groups]
    sizes = [c.num_rows for _, c in groups]
    spec = StageSpec(EmbedChunks, {"cfg": cfg}, pool="embedder", role="embedder")
    run = runner.run([spec], Source(tables=tables, rows=sum(t.num_rows for t in tables)), preserve_order=True,
                     slice_rows=max(sizes))
    g, buf, have = 0, [], 0
    while g < len(groups) and sizes[g] == 0:
        yield keys[g], groups[g][1]
        g += 1
    for batch in run:
        buf.append(batch)
        have += batch.num_rows
        while g < len(groups) and have >= sizes[g]:
            t = pa.concat_tables(buf)
            yield keys[g], t.slice(0, sizes[g]).drop_columns(["_group"])
            rest = t.slice(sizes[g])
            buf, have = [rest], rest.num_rows
            g += 1
            while g < len(groups) and sizes[g] == 0:
                yield keys[g], groups[g][1]
                g += 1


def warm_writes(cfg: Config, runner: Runner) -> None:
    """Load what an index run that writes loads on first use: lancedb (the writes' connection, Collection.db;
    searches never import it), pyarrow.parquet (the embedding's run files, fanout/exec/stage_io.py), the embedder
    (in-process: lent per call as in a round; Ray: nothing to load) and, when `chunk.check_context`, its tokenizer."""
    import lancedb  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    runner.preload("embedder")
    if cfg.chunk.check_context:  # (as `index_vault` asks for it)
        from fanout.actors.tokenizer import shared_counter
        shared_counter(cfg)
