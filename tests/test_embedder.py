"""Real-model embedding test (embeddinggemma-300m installed by the project's setup)."""

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.model


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


def test_two_instances_in_one_process_embed_side_by_side_as_one_does(embedder, cfg):
    """fanout/exec/runner.py Instances over the real embedder: two threads, each on a model of its own (llama.cpp
    runs outside the GIL), give the vectors one model gives the same texts one call at a time."""
    import threading

    from fanout.actors.embedder import Embedder

    from fanout.exec.runner import Instances

    pool = type("Embedder", (Instances,), {"stage": Embedder, "n": 2})(cfg=cfg.replace(embedder={"n_threads": 1}))
    texts = [[f"how do I sync notes {i}", f"restore a deleted note {i}"] for i in range(6)]
    got: dict[int, list] = {}

    def work(i: int) -> None:
        got[i] = pool(pa.table({"text": texts[i], "role": ["query"] * 2}))["vector"].to_pylist()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pool.built == 2 and sorted(got) == list(range(6))
    for i in range(6):
        want = np.asarray(embedder(pa.table({"text": texts[i], "role": ["query"] * 2}))["vector"].to_pylist())
        assert np.allclose(np.asarray(got[i]), want, atol=1e-4)
