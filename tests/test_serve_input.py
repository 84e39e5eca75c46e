"""`fanout serve` against hostile clients: every malformed request gets a 4xx naming what is wrong (never a 500
or a dropped connection), silent and slow connections are closed by the `serve:` timeouts, one connection more
than `serve.max_connections` gets 503, and the port file is never written through a planted link.

The server runs the fake model profile (configs/fake.yaml) on the tiny vault, so it starts in seconds.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from fanout.api.requests import parse_search_request as check_request
from fanout.serve.client import PORT_FILE
from tests.support.serve import running_serve
from tests.support.serve_http import ask, exchange, post
from tests.support.vault import write_vault

REPO = Path(__file__).resolve().parents[1]
CONFIG = """extends: fake
serve:
  idle_timeout_s: 1.0
  request_timeout_s: 2.5
  max_body_kb: 4
  max_connections: 4
  max_results: 50
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory, fake_cfg, fake_runner):
    """A running `fanout serve` on a fake index whose folder had links planted at the port file's names."""
    from fanout.pipelines.index import index_vault

    root = tmp_path_factory.mktemp("serve-input")
    db = root / "db"
    index_vault(write_vault(root / "vault"), db, "t", fake_cfg, fake_runner)
    victim = root / "victim.txt"
    victim.write_text("not yours\n", encoding="utf-8")
    (db / (PORT_FILE + ".tmp")).symlink_to(victim)  # the old fixed temp name
    (db / PORT_FILE).symlink_to(victim)  # a link where the port file goes
    with running_serve(db, "t", CONFIG, root) as info:
        yield {"db": db, "port": info["port"], "token": info["token"], "victim": victim, "root": root}


def test_port_file_replaces_planted_links_and_writes_through_none(server):
    pf = server["db"] / PORT_FILE
    assert not pf.is_symlink() and pf.stat().st_mode & 0o777 == 0o600
    assert server["victim"].read_text(encoding="utf-8") == "not yours\n"
    assert not [p for p in server["db"].iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]


def test_a_good_request_is_answered(server):
    status, data = ask(server, {"mode": "search", "collections": ["t"], "query": "wikilinks", "n": 3})
    assert status == 200 and data["results"][0]["path"] == "Linking/Internal links.md"


@pytest.mark.parametrize(("body", "headers", "status", "match"), [
    (b"[1, 2]", None, 400, "must be a JSON object"),
    (b'"text"', None, 400, "must be a JSON object"),
    (b"null", None, 400, "must be a JSON object"),
    (b"{not json", None, 400, "not JSON"),
    (b"\xff\xfe{}", None, 400, "not JSON"),
    (b"[" * 2000 + b"]" * 2000, None, 400, "not JSON"),  # nesting deeper than the parser's recursion
    (b"{}", "Content-Length: abc\r\n", 400, "Content-Length must be a whole number"),
    (b"{}", "Content-Length: -5\r\n", 400, "Content-Length must be a whole number"),
    (b"{}", "Content-Length: 1e3\r\n", 400, "Content-Length must be a whole number"),
    (b"", "Content-Length: 0\r\n", 400, "body is empty"),
    (b"{}", "", 411, "Content-Length header is required"),
    (b"2\r\n{}\r\n0\r\n\r\n", "Transfer-Encoding: chunked\r\n", 411, "not Transfer-Encoding"),
    (b"{}", "Content-Length: 99999999\r\n", 413, r"at most 4096 \(serve.max_body_kb\)"),
    (b'{"request": {}}', None, 403, "wrong token"),
    (b'{"token": 5, "request": {}}', None, 403, "wrong token"),
    (b'{"token": "\\ud800", "request": {}}', None, 403, "wrong token"),  # a lone surrogate
    (b'{"token": "\xc3\xa9", "request": {}}', None, 403, "wrong token"),  # non-ASCII
])
def test_malformed_bodies_get_a_4xx_naming_the_problem(server, body, headers, status, match):
    got, data = post(server["port"], body, headers)
    assert got == status and re_search(match, data["error"])


@pytest.mark.parametrize(("request_", "match"), [
    (None, "the request must be an object"),
    ([1], "the request must be an object"),
    ("query", "the request must be an object"),
    ({"query": "x", "n": None}, "`n` must be a whole number from 1 to 50"),
    ({"query": "x", "n": 10**18}, "`n` must be a whole number from 1 to 50"),
    ({"query": "x", "n": 0}, "`n` must be a whole number from 1 to 50"),
    ({"query": "x", "n": -3}, "`n` must be a whole number from 1 to 50"),
    ({"query": "x", "n": "5"}, "`n` must be a whole number"),
    ({"query": "x", "n": True}, "`n` must be a whole number"),
    ({"query": "x", "n": 2.5}, "`n` must be a whole number"),
    ({"query": "x", "min_score": [0.5]}, "`min_score` must be a number from 0 to 1"),
    ({"query": "x", "min_score": "nan"}, "`min_score` must be a number from 0 to 1"),
    ({"query": "x", "min_score": 1.5}, "`min_score` must be a number from 0 to 1"),
    ({"query": "x", "mode": "drop"}, "`mode` must be one of"),
    ({"query": "x", "collections": "t"}, "`collections` must be a non-empty list"),
    ({"query": "x", "collections": []}, "`collections` must be a non-empty list"),
    ({"query": "x", "collections": ["../../etc"]}, "is not a collection name"),
    ({"query": "x", "collections": [{"a": 1}]}, "is not a collection name"),
    ({"query": "x", "rerank": "yes"}, "`rerank` must be true, false or null"),
    ({"query": "x", "sql": "drop"}, "unknown request field 'sql'"),
    ({"query": "x", "filter": [1]}, "`filter` must be an object"),
    ({"query": "x", "collections": ["nope"]}, "no index 'nope'"),
])
def test_bad_request_fields_get_400_naming_the_field(server, request_, match):
    status, data = ask(server, request_)
    assert status == 400, data
    assert re_search(match, data["error"])


@pytest.mark.parametrize(("raw", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"PUT /query HTTP/1.0\r\n\r\n", 501),
    (b"GET /query HTTP/1.0\r\n\r\n", 404),
    (b"POST /query HTTP/1.0\r\n" + b"X-A: b\r\n" * 200 + b"\r\n", 431),
])
def test_broken_http_gets_a_4xx_or_501(server, raw, status):
    assert exchange(server["port"], raw)[0] == status


def test_nan_and_infinity_literals_are_refused(server):
    for literal in (b"NaN", b"Infinity", b"-Infinity"):
        body = b'{"token": "%s", "request": {"query": "x", "min_score": %s}}' % (server["token"].encode(), literal)
        status, data = post(server["port"], body)
        assert status == 400 and "`min_score` must be a number from 0 to 1" in data["error"]


def test_a_lone_surrogate_in_a_field_gets_400_naming_it(server):
    for field, value in (("query", "x@"), ("filter", {"tag": ["@"]})):
        doc = {"token": server["token"], "request": {"mode": "search", "query": "x", field: value}}
        body = json.dumps(doc).replace("@", "\\ud800").encode()  # JSON text with an unpaired surrogate
        status, data = post(server["port"], body)
        assert status == 400 and f"`{field}` holds a lone surrogate" in data["error"]


def test_a_silent_connection_is_closed_after_the_idle_timeout(server):
    t = time.monotonic()
    status, _ = exchange(server["port"], b"")
    assert status is None and time.monotonic() - t < 5


def test_a_body_that_stops_short_gets_408(server):
    t = time.monotonic()
    status, data = exchange(server["port"], b"POST /query HTTP/1.0\r\nContent-Length: 100\r\n\r\n{\"tok")
    assert status == 408 and "send the whole body at once" in data["error"]
    assert time.monotonic() - t < 5


def test_a_body_dripped_slower_than_the_request_timeout_gets_408(server):
    t = time.monotonic()
    with socket.create_connection(("127.0.0.1", server["port"]), timeout=10) as s:
        s.sendall(b"POST /query HTTP/1.0\r\nContent-Length: 100\r\n\r\n")
        answer = b""
        for _ in range(20):  # one byte every 0.5 s: never idle for 1 s, but 100 bytes would take 50 s
            try:
                s.sendall(b" ")
            except OSError:
                break
            time.sleep(0.5)
            s.setblocking(False)
            try:
                answer += s.recv(65536)
            except BlockingIOError:
                pass
            s.setblocking(True)
            if answer:
                break
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]  # h11 answers HTTP/1.1 (http.server said 1.0)
    assert b"(serve.request_timeout_s); send the whole body at once" in answer
    assert time.monotonic() - t < 6


def test_one_connection_over_the_limit_gets_503_and_the_server_recovers(server):
    held = [socket.create_connection(("127.0.0.1", server["port"]), timeout=10) for _ in range(4)]
    try:
        time.sleep(0.2)
        status, data = exchange(server["port"], b"GET /health HTTP/1.0\r\n\r\n")
        assert status == 503 and "serve.max_connections" in data["error"]
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    status, data = exchange(server["port"], b"GET /health HTTP/1.0\r\n\r\n")
    assert status == 200 and data == {"ok": True}  # liveness only: no db path without the token


def test_the_server_still_answers_after_all_of_that(server):
    status, data = ask(server, {"mode": "search", "collections": ["t"], "query": "daily notes", "n": 2})
    assert status == 200 and len(data["results"]) == 2


@pytest.mark.parametrize("req", [{"query": "x", "n": 1000}, {"query": "x", "min_score": float("nan")}])
def test_check_request_uses_the_configured_limit(req):
    with pytest.raises(ValueError, match="`n` must be|`min_score` must be"):
        check_request(req, 999)
    check_request({"query": "x", "n": 999, "min_score": 0.5, "rerank": None}, 999)


def test_write_private_replaces_a_link_and_keeps_an_existing_file(tmp_path):
    from fanout.io.private_files import read_private, write_private

    victim = tmp_path / "victim"
    victim.write_text("keep", encoding="utf-8")
    link = tmp_path / "port.json"
    link.symlink_to(victim)
    assert write_private(str(link), "new")
    assert victim.read_text(encoding="utf-8") == "keep" and not link.is_symlink()
    assert link.stat().st_mode & 0o777 == 0o600 and read_private(str(link), "f") == "new"
    assert not write_private(str(link), "other", replace=False) and link.read_text(encoding="utf-8") == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["port.json", "victim"]  # no temp file left
    link.chmod(0o644)
    with pytest.raises(ValueError, match=r"can be read by others \(mode 644\); run `chmod 600"):
        read_private(str(link), "f")
    (tmp_path / "link").symlink_to(link)
    with pytest.raises(ValueError, match="cannot be read .*only you can read"):
        read_private(str(tmp_path / "link"), "f")


def re_search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None
