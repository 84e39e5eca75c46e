"""Real-model embedding test (embeddinggemma-300m installed by the project's setup)."""

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedder(runner):
    return runner.actor("embedder")


def vec(embedder, text, role):
    return np.asarray(embedder(pa.table({"text": [text], "role": [role]}))["vector"][0].as_py())


def test_vectors_are_unit_float32(embedder):
    out = embedder(pa.table({"text": ["hello", "world"], "role": ["query", "document"]}))
    v = np.asarray(out["vector"].to_pylist(), dtype=np.float32)
    assert v.shape == (2, embedder.dim) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)


@pytest.mark.parametrize("query,passage,unrelated", [
    ("how do I keep my notes the same on all devices",
     "Sync keeps your vault identical on every device you sign in on.",
     "Add flour and eggs to the milk and fry the pancakes on a hot pan."),
    ("как синхронизировать заметки между устройствами",
     "Синхронизация хранит одинаковое хранилище на всех ваших устройствах.",
     "Для блинов смешайте молоко, яйца и муку."),
    ("как синхронизировать заметки между устройствами",  # Russian query -> English passage
     "Sync keeps your vault identical on every device you sign in on.",
     "Add flour and eggs to the milk and fry the pancakes on a hot pan."),
])
def test_paraphrase_beats_unrelated_en_ru_and_cross_lingual(embedder, query, passage, unrelated):
    q = vec(embedder, query, "query")
    good, bad = vec(embedder, passage, "document"), vec(embedder, unrelated, "document")
    assert float(q @ good) > float(q @ bad) + 0.1
