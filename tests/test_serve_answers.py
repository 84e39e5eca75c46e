"""`fanout serve` answers a repeated identical request from memory, never after a re-index, and never keeps
an answer with errors (fanout/serve/app.py `App`; no models, no HTTP)."""

from __future__ import annotations

import threading

from fanout.serve.app import App as _App


class CountingService:
    """Stands in for the KnowledgeBase the server answers through: `answer(req)`, `forget(collections)`."""

    def __init__(self):
        from fanout.config import load_config

        self.cfg = load_config("fake")  # the served limits (serve.max_results) come from the service's config
        self.lock = threading.Lock()
        self.open = {"t"}  # collections with open searchers
        self.calls = 0

    def answer(self, req):  # a SearchRequest: the server parsed the JSON
        self.calls += 1
        self.open |= set(req.collections or ["notes"])
        return {"results": [{"path": f"answer {self.calls}"}], "errors": [] if req.query else [{"e": 1}]}

    def forget(self, collections):
        self.open -= set(collections)

    def serves_older(self, names):  # (a round's new version not served yet: never here)
        return False


def test_repeats_come_from_memory_until_the_index_changes(tmp_path):
    mf = tmp_path / "t.manifest.json"
    mf.write_text("{}")
    svc = CountingService()
    app = _App(str(tmp_path), svc, max_answers=2)
    req = {"mode": "query", "query": "sync", "collections": ["t"], "n": 5}
    first = app.run(req)
    again = app.run(dict(reversed(list(req.items()))))  # the same request, keys in another order
    assert svc.calls == 1 and again["answered"] == "memory" and again["results"] == first["results"]
    assert app.run({**req, "n": 6})["results"][0]["path"] == "answer 2"  # another request: answered anew
    mf.write_text('{"tables": {"t_chunks": 2}}')  # a re-index rewrites the manifest (new table versions)
    forgotten = []
    svc.forget = lambda names: forgotten.extend(names)
    assert app.run(req)["results"][0]["path"] == "answer 3" and svc.calls == 3
    assert forgotten == ["t"]  # and its tables are reopened
    app.run({**req, "n": 7})
    app.run({**req, "n": 8})
    assert len(app.answers) == 2  # least recently used dropped


def test_errors_are_never_kept_and_zero_turns_it_off(tmp_path):
    svc = CountingService()
    app = _App(str(tmp_path), svc, max_answers=8)
    bad = {"mode": "query", "query": "", "collections": ["t"]}
    app.run(bad)
    app.run(bad)
    assert svc.calls == 2
    off = _App(str(tmp_path), CountingService(), max_answers=0)
    off.run({"query": "x"})
    off.run({"query": "x"})
    assert off.kb.calls == 2 and not off.answers
