"""`fanout mcp` as an agent sees it: the server runs as a subprocess on the tiny index, driven by the SDK's
own client (ClientSession over stdio_client, and once over streamable HTTP with the bearer token)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import start_blocking_portal
from mcp import ClientSession, StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parents[1]
LANG_LINE = ("The knowledge base is in English and Russian; write short_query and expected_answer in the "
             "language of the notes you expect.")


@pytest.fixture(scope="module")
def mcp_db(tmp_path_factory, tiny_db, tiny_vault) -> Path:
    """A copy of the tiny index whose vault copy also holds traps: symlinks out of the vault, a non-note."""
    root = tmp_path_factory.mktemp("mcp")
    vault, db = root / "vault", root / "db"
    shutil.copytree(tiny_vault, vault)
    shutil.copytree(tiny_db, db)
    (vault / "Escape.md").symlink_to("/etc/passwd")
    (vault / "etc").symlink_to("/etc", target_is_directory=True)
    (vault / "secret.txt").write_text("not a note", encoding="utf-8")
    manifest = db / "t.manifest.json"
    data = {**json.loads(manifest.read_text(encoding="utf-8")), "vault": str(vault)}
    manifest.write_text(json.dumps(data), encoding="utf-8")
    # local expansion off, so a query without agent fields is plain hybrid search (no LLM call in the test)
    (root / "noexpand.yaml").write_text("extends: local\nexpand:\n  enabled: false\n", encoding="utf-8")
    return db


def server_cmd(db: Path, *extra: str) -> list[str]:
    return ["-m", "fanout.cli.main", "mcp", "--db", str(db), "--collection", "t",
            "--config", str(db.parent / "noexpand.yaml"), *extra]


def server_env() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k.startswith(("FANOUT_", "LANCEDB_"))}
    return {**keep, "PYTHONPATH": str(REPO)}


class Client:
    """Synchronous calls into an MCP ClientSession that lives in a blocking portal's event loop."""

    def __init__(self, portal, session: ClientSession, init):
        self.portal, self.session, self.init = portal, session, init

    def call(self, tool: str, args: dict):
        return self.portal.call(self.session.call_tool, tool, args)

    def ok(self, tool: str, args: dict) -> dict:
        res = self.call(tool, args)
        assert not res.is_error, res.content[0].text
        if tool != "get":  # the text content is the structured content as JSON
            assert json.loads(res.content[0].text) == res.structured_content
        return res.structured_content

    def error(self, tool: str, args: dict) -> str:
        res = self.call(tool, args)
        assert res.is_error, f"{tool}({args}) succeeded: {res.content[0].text[:200]}"
        return res.content[0].text


@pytest.fixture(scope="module")
def client(mcp_db):
    params = StdioServerParameters(command=sys.executable, args=server_cmd(mcp_db), env=server_env(),
                                   cwd=str(REPO))
    with (
        open(mcp_db.parent / "server.log", "w") as errlog,
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(stdio_client(params, errlog=errlog)) as (read, write),
        portal.wrap_async_context_manager(ClientSession(read, write)) as session,
    ):
        yield Client(portal, session, portal.call(session.initialize))


def test_tools_listed_with_the_knowledge_base_languages_in_their_descriptions(client):
    tools = {t.name: t for t in client.portal.call(client.session.list_tools).tools}
    assert set(tools) == {"search", "get", "status"}
    search = tools["search"]
    props = search.input_schema["properties"]
    assert search.input_schema["required"] == ["query"]
    assert set(props) == {"query", "short_query", "rephrased_query", "expected_answer", "intent", "searches",
                          "limit", "rerank", "filter", "sections"}
    assert LANG_LINE in props["filter"]["description"]
    assert LANG_LINE in search.description
    assert LANG_LINE in props["short_query"]["description"]
    assert LANG_LINE in props["expected_answer"]["description"]
    assert "help page title" in props["short_query"]["description"]
    assert "the way documentation is written" in props["expected_answer"]["description"]
    assert props["searches"]["maxItems"] == 10 and props["limit"]["maximum"] == 50
    assert props["sections"]["maximum"] == 20 and "sections" in props["sections"]["description"]
    assert tools["get"].input_schema["required"] == ["path"]
    assert LANG_LINE in client.init.instructions and "short_query" in client.init.instructions


def test_search_without_agent_fields(client):
    data = client.ok("search", {"query": "how do I highlight code syntax"})
    assert data["results"][0]["path"] == "Editing/Code blocks.md"
    assert all(set(r) == {"path", "title", "heading", "snippet", "score"} for r in data["results"])
    scores = [r["score"] for r in data["results"]]
    assert scores == sorted(scores, reverse=True)


def test_search_with_agent_fields_and_limit(client):
    data = client.ok("search", {
        "query": "keep devices in step", "short_query": "Version history",
        "rephrased_query": "how do I restore an old version of a file",
        "expected_answer": "Every file keeps its versions for 12 months.", "limit": 2})
    assert len(data["results"]) == 2
    assert data["results"][0]["path"] == "Sync/Sync your notes.md"
    assert "hints" not in data  # fields of the right shape get no hint


def test_weak_fields_get_short_hints_naming_page_titles(client):
    data = client.ok("search", {
        "query": "how do I link notes to each other", "short_query": "link notes",
        "rephrased_query": "How can one note point to another?",
        "expected_answer": "The documentation should explain how to link notes."})
    short, answer = data["hints"]
    # words copied from the question: the hint asks for the feature's name and offers the found pages' titles
    assert short.startswith("short_query works best as the feature's name, the way a help page title says it")
    assert "e.g. one of: " in short and "Internal links" in short.split("e.g. one of: ")[1]
    assert answer.startswith("expected_answer works best as one or two sentences that could stand in the note")
    assert data["results"][0]["path"] == "Linking/Internal links.md"  # the search itself still answers
    data = client.ok("search", {"query": "sync", "short_query": "sync, devices, versions"})
    assert data["hints"][0].startswith("short_query works best as one name, not a list")


def test_search_with_qmd_searches(client):
    data = client.ok("search", {"query": "old links", "searches": [
        {"type": "lex", "query": "wikilinks"},
        {"type": "hyde", "query": "Link one note to another with wikilinks."}]})
    assert data["results"][0]["path"] == "Linking/Internal links.md"


@pytest.mark.parametrize(("args", "match"), [
    ({}, "`query` is missing"),
    ({"query": 5}, "`query` must be a string"),
    ({"query": "x", "limit": 500}, "`limit` must be an integer from 1 to 50"),
    ({"query": "x", "rerank": "yes"}, "`rerank` must be true or false"),
    ({"query": "x", "short_query": ["a", "b"]}, "`short_query` must be a string"),
    ({"query": "x", "searches": [{"type": "sql", "query": "y"}]}, r"`searches\[0\]\.type`: unknown variant"),
    ({"query": "x", "searches": [{"type": "lex", "query": "y"}] * 11}, "at most 10"),
    ({"query": "x", "short": "y"}, "unknown argument `short` for search"),
])
def test_bad_search_arguments_name_the_field_and_the_fix(client, args, match):
    assert re.search(match, client.error("search", args))


def test_get_a_note_and_one_section(client):
    note = client.ok("get", {"path": "Sync/Sync your notes.md"})
    assert note["title"] == "Sync your notes" and note["heading"] is None
    assert note["text"].startswith("Sync keeps your vault") and "aliases:" not in note["text"]
    assert "## Version history" in note["text"]
    # ".md" may be left off; the heading matches in any case
    sec = client.ok("get", {"path": "Sync/Sync your notes", "heading": "version history"})
    assert sec["heading"] == "Version history"
    assert sec["text"].startswith("## Version history") and "Set up sync" not in sec["text"]
    h1 = client.ok("get", {"path": "Editing/Code blocks.md", "heading": "Code blocks"})  # with subsections
    assert "## Syntax highlighting" in h1["text"] and "# this is a comment" in h1["text"]
    sub = client.ok("get", {"path": "Editing/Code blocks.md", "heading": "Code blocks > Syntax highlighting"})
    assert sub["text"].startswith("## Syntax highlighting")
    assert client.ok("get", {"path": "Obsidian Sync"})["path"] == "Sync/Sync your notes.md"  # an alias
    ru = client.ok("get", {"path": "Синхронизация/Синхронизация заметок.md"})
    assert ru["lang"] == "ru"
    assert "headings: ['Set up sync', 'Version history']" in client.error(
        "get", {"path": "Sync/Sync your notes.md", "heading": "Pricing"})
    assert "did you mean ['Sync/Sync your notes.md'" in client.error("get", {"path": "Sync/Sync notes.md"})


@pytest.mark.parametrize(("path", "match"), [
    ("../../etc/passwd", "leads outside the vault"),
    ("Sync/../../../etc/passwd", "leads outside the vault"),
    ("/etc/passwd", "must be relative to the vault"),
    ("~/.ssh/id_rsa", "must be relative to the vault"),
    ("Escape.md", "leads outside the vault"),  # a symlink to /etc/passwd inside the vault
    ("etc/passwd", "leads outside the vault"),  # a folder symlink out of the vault
    ("secret.txt", "is not a note"),
    ("a/" * 600 + "b.md", "over 1024 characters"),
])
def test_get_refuses_anything_outside_the_vault(client, path, match):
    msg = client.error("get", {"path": path})
    assert match in msg and "root:" not in msg


def test_status(client):
    st = client.ok("status", {})
    assert st["collection"] == "t" and st["notes"] == 6 and st["chunks"] >= 6
    assert st["languages"] == {"en": 4, "ru": 2}
    assert st["models"]["embedder"].endswith(".gguf") and st["models"]["expander"] is None
    assert st["rerank_default"] is False and st["indexed_at"].endswith("Z")


def test_concurrent_calls_are_all_answered(client):
    async def many() -> list:
        out: list = []
        async with anyio.create_task_group() as tg:
            for q in ("wikilinks", "pancakes", "version history", "daily notes"):
                tg.start_soon(lambda q=q: _append(out, client.session.call_tool("search", {"query": q})))
            tg.start_soon(lambda: _append(out, client.session.call_tool("status", {})))
        return out

    results = client.portal.call(many)
    assert len(results) == 5 and not any(r.is_error for r in results)


async def _append(out: list, coro) -> None:
    out.append(await coro)


def test_streamable_http(mcp_db):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(mcp_db.parent / "http.log", "w") as log:
        proc = subprocess.Popen([sys.executable, *server_cmd(mcp_db, "--http", str(port))], cwd=REPO,
                                env={**os.environ, **server_env()}, stdout=log, stderr=log)
    try:
        async def session() -> tuple[list[str], dict]:
            token = (mcp_db / ".fanout-mcp-token").read_text(encoding="utf-8").strip()  # made at start
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
                streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                names = [t.name for t in (await s.list_tools()).tools]
                res = await s.call_tool("search", {"query": "pancakes", "limit": 1})
                return names, res.structured_content

        deadline = time.monotonic() + 120
        while True:
            try:
                names, data = anyio.run(session)
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.5)
        assert names == ["search", "get", "status"]
        assert data["results"][0]["path"] == "Рецепты/Блины.md"
    finally:
        proc.terminate()
        proc.wait(10)
