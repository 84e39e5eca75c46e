"""A runner with a hashed embedder (no model) and a vault of many notes, for the storage tests (local and S3)."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from fanout.exec.runner import Runner


# -- collections with a fake embedder ----------------------------------------------------------------------
class HashEmbedder:
    """768-d unit vectors from a hash of the text: deterministic, no model."""

    dim = 768

    def __init__(self, cfg=None):
        pass

    def __call__(self, batch: pa.Table) -> pa.Table:
        vecs = []
        for t in batch.column("text").to_pylist():
            rng = np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:12], 16))
            v = rng.standard_normal(self.dim).astype(np.float32)
            vecs.append(v / np.linalg.norm(v))
        flat = pa.array(np.concatenate(vecs) if vecs else np.zeros(0, np.float32), pa.float32())
        return batch.append_column("vector", pa.FixedSizeListArray.from_arrays(flat, self.dim))


class FakeRunner(Runner):
    def actor(self, role):
        assert role == "embedder", role
        return self._actors.setdefault(role, HashEmbedder())


def many_notes(n: int) -> dict[str, str]:
    return {f"Topic {i // 50}/Note {i}.md": f"# Note {i}\n\nFact number {i} about topic {i // 50}: "
            f"{['alpha', 'beta', 'gamma', 'delta'][i % 4]} {i * 7919 % 1000}.\n" for i in range(n)}
