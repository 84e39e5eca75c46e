"""`fanout serve`'s answer memory is never stale (issue 42 item 2): a request that names no collection searches
the default one, and its remembered answer is keyed on that collection's index state too, so `fanout index`
adding a note or `fanout collection remove` makes the next identical request miss; a removed collection's
answers and Searchers are dropped. The index state is read through the storage layer, so a db given as a
URI (file://, s3://) works as a folder does (os.stat on `<db>/<name>.manifest.json` did not).

The real SearchService on the fake model profile (no HTTP, no models).
"""

from __future__ import annotations

import pytest

from fanout.defaults import DEFAULT_COLLECTION
from fanout.serve.app import App as _App
from tests.support.vault import write_vault

REQ = {"mode": "search", "query": "zebra crossing", "n": 5}  # no `collections`: the default one


@pytest.fixture()
def served(tmp_path, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    from fanout.api import KnowledgeBase

    vault = write_vault(tmp_path / "vault")
    db = tmp_path / "db"
    index_vault(vault, db, DEFAULT_COLLECTION, fake_cfg, fake_runner)
    with KnowledgeBase(db, DEFAULT_COLLECTION, fake_cfg) as kb:
        yield vault, db, _App(str(db), kb, max_answers=8)


def paths(resp: dict) -> list[str]:
    return [r["path"] for r in resp["results"]]


def test_a_request_naming_no_collection_misses_after_a_note_is_indexed(served, fake_cfg, fake_runner):
    from fanout.pipelines.index import index_vault

    vault, db, app = served
    first = app.run(dict(REQ))
    assert app.run(dict(REQ))["answered"] == "memory"
    assert "Zebra.md" not in paths(first)
    (vault / "Zebra.md").write_text("# Zebra crossing\n\nA zebra crossing is where to cross the road.\n",
                                    encoding="utf-8")
    index_vault(vault, db, DEFAULT_COLLECTION, fake_cfg, fake_runner)
    again = app.run(dict(REQ))
    assert "answered" not in again and "Zebra.md" in paths(again)  # answered anew, from the new index
    assert app.run(dict(REQ))["answered"] == "memory"


def test_removing_the_collection_drops_its_answers_and_searchers(served):
    from fanout.api.catalog import remove_collection

    _, db, app = served
    app.run(dict(REQ))
    app.run({**REQ, "collections": [DEFAULT_COLLECTION], "n": 3})
    assert len(app.answers) == 2 and app.kb.opened
    remove_collection(db, DEFAULT_COLLECTION)
    with pytest.raises(FileNotFoundError, match=f"no index '{DEFAULT_COLLECTION}'"):
        app.run(dict(REQ))  # never the remembered answer
    assert not app.answers and not app.kb.opened and DEFAULT_COLLECTION not in app.stamps


def test_optimize_or_any_manifest_rewrite_misses_but_an_untouched_index_hits(served):
    _, db, app = served
    app.run(dict(REQ))
    mf = db / f"{DEFAULT_COLLECTION}.manifest.json"
    text = mf.read_text(encoding="utf-8")
    mf.write_text(text, encoding="utf-8")  # the same content (a run that changed nothing): still the same index
    assert app.run(dict(REQ))["answered"] == "memory"
    mf.write_text(text.replace('"tables"', '"other": 1, "tables"', 1), encoding="utf-8")
    assert "answered" not in app.run(dict(REQ))


def test_the_index_state_is_read_through_the_storage_layer(tmp_path, fake_cfg, fake_runner):
    """A db given as a file:// URI: the manifest is found (os.path.join on the URI found nothing, so nothing
    was ever invalidated)."""
    from fanout.pipelines.index import index_vault

    from fanout.api import KnowledgeBase

    vault = write_vault(tmp_path / "vault")
    uri = f"file://{tmp_path / 'db'}"
    index_vault(vault, uri, "t", fake_cfg, fake_runner)
    app = _App(uri, KnowledgeBase(uri, "t", fake_cfg), max_answers=8)
    state = app.state("t")
    assert state is not None and app.stamps == {"t": state}
    (vault / "Zebra.md").write_text("# Zebra\n\nStripes.\n", encoding="utf-8")
    index_vault(vault, uri, "t", fake_cfg, fake_runner)
    assert app.state("t") not in (None, state)
    assert app.state("nope") is None


@pytest.fixture(scope="module")
def s3_cfg():
    """The fake profile reaching a moto S3 server on 127.0.0.1 (a free port) with one bucket."""
    import logging
    import socket

    import boto3
    from moto.server import ThreadedMotoServer  # moto[server], in the dev extra

    from fanout.config import load_config

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    srv.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket="fanout-serve")
    yield load_config("fake").replace(storage={"endpoint": endpoint, "region": "us-east-1",
                                               "access_key_id": "testing", "secret_access_key": "testing"})
    srv.stop()


def test_the_index_state_of_an_s3_db(s3_cfg):
    """On s3:// the manifest is an object: its state changes when it is rewritten, and is None once removed."""

    from fanout.store import storage

    class Service:  # what _App uses of the KnowledgeBase
        cfg, opened = s3_cfg, {"t"}

        def forget(self, names):
            self.opened -= set(names)

        def serves_older(self, names):  # (a round's new version not served yet: never here)
            return False

    db = "s3://fanout-serve/db"
    mf = f"{db}/t.manifest.json"
    storage.write_text(mf, '{"tables": {"t_chunks": 1}}', s3_cfg.storage)
    app = _App(db, Service(), max_answers=8)
    first = app.state("t")
    assert first is not None and app.state("t") == first
    storage.write_text(mf, '{"tables": {"t_chunks": 2}}', s3_cfg.storage)
    assert app.state("t") not in (None, first)
    app._reopen()  # what the next search does first
    assert not app.kb.opened
    storage.remove(mf, s3_cfg.storage)
    assert app.state("t") is None and "t" not in app.stamps


def test_an_answer_from_memory_does_not_wait_for_a_search(tmp_path):
    """While one request is searched (slowly), a remembered one is answered at once: the event loop stays free
    and searches queue there, not in the worker threads."""
    import asyncio
    import json
    import threading
    import time

    from fanout.config import load_config
    from fanout.serve.app import asgi_app as _asgi

    class Slow:
        cfg, lock = load_config("fake"), threading.Lock()

        def forget(self, names):
            pass

        def serves_older(self, names):  # (a round's new version not served yet: never here)
            return False

        def answer(self, req):  # a SearchRequest: the server parsed the JSON
            with self.lock:
                if req.query == "slow":
                    time.sleep(1.5)
                return {"results": [{"path": req.query}], "errors": []}

    (tmp_path / "t.manifest.json").write_text("{}")
    app = _App(str(tmp_path), Slow(), max_answers=8)
    fast = {"mode": "search", "collections": ["t"], "query": "fast"}
    app.run(fast)  # remembered
    asgi = _asgi(app, app.kb.cfg.serve)

    async def call(req: dict) -> tuple[int, dict, float]:
        body = json.dumps({"token": app.token, "request": req}).encode()
        scope = {"type": "http", "method": "POST", "raw_path": b"/query", "query_string": b"",
                 "headers": [(b"content-length", str(len(body)).encode())]}
        sent: list[dict] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(msg: dict) -> None:
            sent.append(msg)

        t = time.monotonic()
        await asgi(scope, receive, send)
        return sent[0]["status"], json.loads(sent[1]["body"]), time.monotonic() - t

    async def main() -> None:
        slow = [asyncio.create_task(call({**fast, "query": "slow", "n": n})) for n in (1, 2, 3, 4, 5, 6, 7, 8)]
        await asyncio.sleep(0.2)  # the first slow search runs, seven more wait
        status, data, seconds = await call(fast)
        assert status == 200 and data["answered"] == "memory" and seconds < 0.5
        assert not any(t.done() for t in slow)
        for t in slow[1:]:  # still waiting for their turn: no thread runs them yet
            t.cancel()
        assert (await slow[0])[0] == 200

    asyncio.run(main())
