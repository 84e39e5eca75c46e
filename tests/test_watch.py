"""`--watch` (issue 43): the index follows the vault's file events, one incremental round per batch.

Each test writes its own vault under tmp_path and watches it with the fake profile (no models). Waits poll for
the condition with a bounded timeout (`Watcher.wait`, a deadline loop); a "no round happened" check is made
deterministic by a marker note written afterwards: its round must be the very next one and hold only it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import fanout
from fanout.config import ConfigError, load_config
from tests.support.vault import write_vault
from tests.support.watch import NOTES, WAIT, fanout_cli, fast_cfg, found, indexed, round_after

REPO = Path(__file__).resolve().parents[1]
@pytest.fixture()
def watching(tmp_path):
    vault = write_vault(tmp_path / "vault", NOTES)
    with fanout.open(tmp_path / "db", config=fast_cfg()) as kb:
        w = kb.watch(vault)
        assert w.wait(1, WAIT) and w.last.error is None
        yield vault, kb, w
        assert w.stop(WAIT)


def test_create_and_edit(watching):
    vault, kb, w = watching
    r = round_after(w, lambda: (vault / "Garden/Lilies.md").write_text("# Lilies\n\nLilies like shade.\n"))
    assert r.changes == (("added", "Garden/Lilies.md"),) and r.report.embedded_notes == 1
    assert found(kb, "lilies shade") == ["Garden/Lilies.md"]
    r = round_after(w, lambda: (vault / "Home.md").write_text("# Home\n\nA marmalade recipe lives here.\n"))
    assert r.report.embedded_notes == 1 and r.report.deleted == 0
    assert found(kb, "marmalade") == ["Home.md"] and found(kb, "welcome") == []


@pytest.mark.slow
def test_renames_within_and_across_folders_and_delete(watching):
    vault, kb, w = watching
    round_after(w, lambda: os.rename(vault / "Garden/Roses.md", vault / "Garden/Old roses.md"))
    assert indexed(kb) == {"Home.md", "Garden/Old roses.md", "Garden/Tulips.md"}
    # a new folder is a round of its own (files put in it before the OS watches it come with that round)
    assert round_after(w, lambda: (vault / "Archive").mkdir()).changes == (("added", "Archive"),)
    r = round_after(w, lambda: os.rename(vault / "Garden/Tulips.md", vault / "Archive/Tulips.md"))
    assert {p for _, p in r.changes} == {"Garden/Tulips.md", "Archive/Tulips.md"}
    assert indexed(kb) == {"Home.md", "Garden/Old roses.md", "Archive/Tulips.md"}
    assert found(kb, "tulip bulbs") == ["Archive/Tulips.md"]
    r = round_after(w, lambda: os.remove(vault / "Home.md"))
    assert r.report.deleted == 1 and "Home.md" not in indexed(kb)


@pytest.mark.slow
def test_folder_moves_within_out_of_and_into_the_vault(watching, tmp_path):
    vault, kb, w = watching
    round_after(w, lambda: os.rename(vault / "Garden", vault / "Yard"))  # one event for the folder
    assert indexed(kb) == {"Home.md", "Yard/Roses.md", "Yard/Tulips.md"}
    round_after(w, lambda: os.rename(vault / "Yard", tmp_path / "Yard"))  # away: a folder that held notes
    assert indexed(kb) == {"Home.md"}
    round_after(w, lambda: os.rename(tmp_path / "Yard", vault / "Back"))  # in, with its notes
    assert indexed(kb) == {"Home.md", "Back/Roses.md", "Back/Tulips.md"}


def test_a_burst_of_saves_is_one_round_that_embeds_the_note_once(watching):
    vault, kb, w = watching

    def burst():
        for i in range(20):
            (vault / "Home.md").write_text(f"# Home\n\nDraft number {i} of the welcome page.\n")

    r = round_after(w, burst)
    assert r.report.embedded_notes == 1 and r.report.embedded_chunks == 1
    assert found(kb, "draft number 19") == ["Home.md"]
    # and fifty notes written at once (a `git checkout`) are one round too
    n = w.rounds
    r = round_after(w, lambda: write_vault(vault, {f"Garden/Note {i}.md": f"# Note {i}\n\nbatch {i}\n" for i in range(50)}))
    assert w.rounds == n + 1 and r.report.embedded_notes == 50 and len(r.changes) == 50


def test_an_atomic_save_is_one_edit_and_the_temp_file_is_never_indexed(watching):
    vault, kb, w = watching

    def atomic():
        for tmp in (vault / "Garden/.Roses.md.swp", vault / "Garden/Roses.md.tmp~", vault / "Garden/Roses.tmp.md"):
            tmp.write_text("# Roses\n\nPrune roses hard in March.\n")
            os.replace(tmp, vault / "Garden/Roses.md")

    r = round_after(w, atomic)
    assert r.report.embedded_notes == 1 and r.report.deleted == 0
    assert indexed(kb) == set(NOTES) and found(kb, "march") == ["Garden/Roses.md"]


def test_ignored_paths_start_no_round(watching):
    vault, kb, w = watching
    n = w.rounds
    r = round_after(w, lambda: (vault / ".fanoutignore").write_text("Drafts/\n*.private.md\n"))
    assert r.changes == (("added", ".fanoutignore"),)  # the rules changed: a round, then they hold
    n = w.rounds
    write_vault(vault, {".obsidian/workspace.json": "{}", ".git/HEAD": "ref", ".trash/Old.md": "# Old\n",
                  "Drafts/Secret plan.md": "# Plan\n\nzeppelin\n", "Garden/Diary.private.md": "zeppelin\n",
                  "Garden/photo.png": "not a note"})
    r = round_after(w, lambda: (vault / "Marker.md").write_text("# Marker\n"))
    assert w.rounds == n + 1 and r.changes == (("added", "Marker.md"),)
    assert found(kb, "zeppelin") == [] and "Drafts/Secret plan.md" not in indexed(kb)


def test_a_symlink_out_of_the_vault_made_while_watching_is_never_indexed(watching, tmp_path):
    vault, kb, w = watching
    outside = tmp_path / "outside"
    write_vault(outside, {"Secret.md": "# Secret\n\nxylophone\n"})
    n = w.rounds
    os.symlink(outside, vault / "Linked")
    os.symlink(outside / "Secret.md", vault / "Leak.md")
    (outside / "Secret.md").write_text("# Secret\n\nxylophone again\n")  # an edit behind the link
    r = round_after(w, lambda: (vault / "Marker.md").write_text("# Marker\n"))
    assert w.rounds == n + 1 and r.changes == (("added", "Marker.md"),)
    assert found(kb, "xylophone") == [] and indexed(kb) == {*NOTES, "Marker.md"}
    # the round read only its event's path (the links made no event); a whole walk lists and refuses them
    assert {s["path"] for s in r.report.skipped} == set()
    rep = kb.index(vault)
    assert {s["path"] for s in rep.skipped if s["reason"] == "outside_vault"} == {"Leak.md", "Linked/"}
    assert found(kb, "xylophone") == [] and indexed(kb) == {*NOTES, "Marker.md"}


def test_edits_behind_a_folder_link_that_was_there_before_watching_start_no_round(tmp_path):
    outside = write_vault(tmp_path / "outside", {"Secret.md": "# Secret\n"})
    vault = write_vault(tmp_path / "vault", NOTES)
    os.symlink(outside, vault / "Linked")  # the OS watch follows it from the start: its events are dropped
    with fanout.open(tmp_path / "db", config=fast_cfg()) as kb, kb.watch(vault) as w:
        assert w.wait(1, WAIT)
        n = w.rounds
        (outside / "Secret.md").write_text("# Secret\n\nxylophone\n")
        (outside / "More.md").write_text("# More\n\nxylophone\n")
        r = round_after(w, lambda: (vault / "Marker.md").write_text("# Marker\n"))
        assert w.rounds == n + 1 and r.changes == (("added", "Marker.md"),)
        assert found(kb, "xylophone") == [] and indexed(kb) == {*NOTES, "Marker.md"}


def test_a_failed_round_is_logged_and_retried_and_the_watcher_keeps_going(watching, caplog):
    from fanout.store.locks import collection_lock

    vault, kb, w = watching
    with collection_lock(kb.db, kb.collection, "a test holding the index"):  # as a `fanout index` running
        n = w.rounds
        (vault / "Late.md").write_text("# Late\n\nquokka\n")
        assert w.wait(n + 1, WAIT) and w.last.error and "a test holding the index" in w.last.error
        assert w.running and w.errors >= 1
    deadline = time.monotonic() + WAIT
    while w.last.error is not None:  # retried after watch.retry_s, with no new event
        assert time.monotonic() < deadline and w.running
        time.sleep(0.05)
    assert ("added", "Late.md") in w.last.changes and found(kb, "quokka") == ["Late.md"]
    assert any("failed" in rec.getMessage() for rec in caplog.records if rec.levelname == "ERROR")


def test_stop_ends_the_thread_and_a_failing_hook_does_not(tmp_path):
    vault = write_vault(tmp_path / "vault", NOTES)
    seen = []

    def hook(r):
        seen.append(r.number)
        raise RuntimeError("a caller's bug")

    with fanout.open(tmp_path / "db", config=fast_cfg()) as kb, kb.watch(vault, on_round=hook) as w:
        assert w.wait(1, WAIT)
        round_after(w, lambda: (vault / "New.md").write_text("# New\n"))
        assert seen == [1, 2] and w.running
        t = time.monotonic()
        assert w.stop(WAIT) and not w.running and time.monotonic() - t < 5


def test_the_watcher_loads_a_rounds_needs_once_idle_and_a_failure_there_is_only_logged(tmp_path, caplog):
    vault = write_vault(tmp_path / "vault", NOTES)
    calls = []
    with fanout.open(tmp_path / "db", config=fast_cfg(rounds_in="thread")) as kb:  # (the hook is this process's)
        kb.warm_index()  # what the watcher calls: it loads and returns (the fake models: nothing heavy)
        kb.warm_index = lambda: (calls.append(time.time()), 1 / 0)  # type: ignore[method-assign]
        with kb.watch(vault) as w:
            assert w.wait(1, WAIT) and w.warmed.wait(WAIT)  # after the first round, at an idle tick
            assert len(calls) == 1 and calls[0] >= w.last.started
            round_after(w, lambda: (vault / "New.md").write_text("# New\n\nNewt.\n"))
            assert len(calls) == 1 and w.last.error is None and found(kb, "newt") == ["New.md"]
    assert any("loading ahead what a round needs failed (ZeroDivisionError" in rec.getMessage()
               for rec in caplog.records)


def test_bad_input_is_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"watch\.step_ms must be a whole number"):
        load_config("fake").replace(watch={"step_ms": 0})
    with pytest.raises(ConfigError, match=r"watch\.debounce_ms must be >= watch\.step_ms"):
        load_config("fake").replace(watch={"debounce_ms": 100, "step_ms": 300})
    with fanout.open(tmp_path / "db", config="fake") as kb:
        with pytest.raises(fanout.FanoutError, match="does not exist"):
            kb.watch(tmp_path / "nowhere")
        with pytest.raises(fanout.UserError, match="on_round"):
            kb.watch(tmp_path, on_round="print")


@pytest.mark.parametrize("rounds_in", ["thread", pytest.param("process", marks=pytest.mark.slow)])
def test_mcp_tools_see_a_new_note_without_restart(tmp_path, rounds_in):
    from fanout.exec.runner import Runner
    from fanout.serve.mcp import FanoutTools

    vault = write_vault(tmp_path / "vault", NOTES)
    cfg = fast_cfg(rounds_in=rounds_in)
    with Runner(cfg) as runner:
        fanout.api.KnowledgeBase.attach(tmp_path / "db", "notes", cfg, runner).index(vault)
        tools = FanoutTools(tmp_path / "db", "notes", cfg, runner)
        with tools.kb.watch(vault) as w:
            assert w.wait(1, WAIT)
            round_after(w, lambda: (vault / "Bees.md").write_text("# Bees\n\nBees make honey.\n"))
            assert "Bees.md" in [r["path"] for r in tools.search({"query": "honey bees"})["results"]]
            assert "Bees make honey." in tools.get({"path": "Bees.md"})["text"]
            assert tools.status({})["notes"] == 4


def started(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as fh:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(fanout_cli(*cmd), cwd=REPO, stdout=fh, stderr=fh,
                                env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.slow
def test_serve_picks_up_a_new_note_and_its_answer_memory_is_never_stale(tmp_path):
    from fanout.serve.client import PORT_FILE, ask_server

    vault, db = write_vault(tmp_path / "vault", NOTES), tmp_path / "db"
    cfg = tmp_path / "watch.yaml"
    cfg.write_text("extends: fake\nwatch:\n  tick_ms: 200\n", encoding="utf-8")
    proc = started(["serve", "--db", str(db), "--config", str(cfg), "--watch", str(vault)], tmp_path / "serve.log")
    try:
        deadline = time.monotonic() + WAIT
        while not (db / PORT_FILE).exists():  # a new db: the first round runs before the port file is written
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        req = {"mode": "search", "query": "honey bees", "n": 5}

        def ask() -> dict:
            resp = ask_server(db, dict(req), str(cfg))
            assert resp is not None, (tmp_path / "serve.log").read_text()
            return resp

        assert ask()["results"] == [] and ask().get("answered") == "memory"
        (vault / "Bees.md").write_text("# Bees\n\nBees make honey.\n")
        while not ask()["results"]:  # answered from memory until the round publishes, then anew
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        again = ask()
        assert again.get("answered") == "memory" and [r["path"] for r in again["results"]] == ["Bees.md"]
        (vault / "Bees.md").unlink()
        while ask()["results"]:
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        assert "watch round" in (tmp_path / "serve.log").read_text()
    finally:
        proc.terminate()
        proc.wait(20)


def test_cli_index_watch_prints_each_round_and_ctrl_c_stops_it(tmp_path):
    vault, db = write_vault(tmp_path / "vault", NOTES), tmp_path / "db"
    cfg = tmp_path / "watch.yaml"
    cfg.write_text("extends: fake\nwatch:\n  tick_ms: 200\n", encoding="utf-8")
    log = tmp_path / "index.log"
    proc = started(["index", str(vault), "--db", str(db), "--config", str(cfg), "--watch"], log)
    try:
        deadline = time.monotonic() + WAIT
        while "watch round 1" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        (vault / "Bees.md").write_text("# Bees\n")
        while "watch round 2, 1 change (added Bees.md)" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert json.loads((db / "notes.manifest.json").read_text())["stats"]["notes"] == 4


def test_serve_watch_keeps_one_collection_and_index_watch_refuses_rebuild(tmp_path, capsys):
    from fanout.cli.main import main

    vault = write_vault(tmp_path / "vault", NOTES)
    assert main(["serve", "--db", str(tmp_path / "db"), "--config", "fake", "--watch", str(vault),
                 "-c", "a,b"]) == 2
    assert "--watch keeps one collection current, got -c a,b; give -c with one name" in capsys.readouterr().err
    assert main(["index", str(vault), "--db", str(tmp_path / "db"), "--config", "fake", "--watch",
                 "--rebuild"]) == 2
    assert "--rebuild and --watch do not go together" in capsys.readouterr().err


def test_closing_the_knowledge_base_stops_its_watchers(tmp_path):
    vault = write_vault(tmp_path / "vault", NOTES)
    kb = fanout.open(tmp_path / "db", config=fast_cfg())
    w = kb.watch(vault)
    assert w.wait(1, WAIT)
    kb.close()
    assert not w.running
    with pytest.raises(fanout.UserError, match="is closed"):
        kb.watch(vault)


def _listings(monkeypatch) -> list[tuple[object, int]]:
    """Each vault listing of the index runs, as (the paths it was limited to or None, how many notes it listed)."""
    from fanout.pipelines import scan_notes

    calls: list[tuple[object, int]] = []
    real = scan_notes.list_notes

    def counted(*a, **k):
        out = real(*a, **k)
        calls.append((k.get("only"), len(out.files)))
        return out

    monkeypatch.setattr(scan_notes, "list_notes", counted)
    return calls


@pytest.mark.parametrize("every_s", [300.0, 0.001])
def test_a_round_after_an_edit_reads_only_that_note(tmp_path, monkeypatch, every_s):
    notes = {**NOTES, **{f"Many/n{i}.md": f"# N{i}\n\nFiller note {i}.\n" for i in range(30)}}
    vault = write_vault(tmp_path / "vault", notes)
    calls = _listings(monkeypatch)
    cfg = fast_cfg(full_walk_every_s=every_s, rounds_in="thread").replace(index={"stat_racy_s": 0})  # (counted here)
    with fanout.open(tmp_path / "db", config=cfg) as kb:
        w = kb.watch(vault)
        assert w.wait(1, WAIT) and w.last.error is None
        assert calls[-1] == (None, 33)  # the first round walks the whole vault
        r = round_after(w, lambda: (vault / "Home.md").write_text("# Home\n\nA marmalade recipe lives here.\n"))
        assert r.report.read_notes == 1 and r.report.embedded_notes == 1 and r.report.notes == 33
        if every_s > 1:  # the event's path alone is listed and stat'ed
            assert calls[-1] == ({"Home.md"}, 1)
        else:  # a whole walk is due at every round
            assert calls[-1] == (None, 33)
        assert found(kb, "marmalade") == ["Home.md"]
        r = round_after(w, lambda: os.rename(vault / "Many", vault / "Lots"))
        assert r.report.read_notes == 30 and r.report.deleted == 30 and r.report.notes == 33
        assert indexed(kb) == {p.replace("Many/", "Lots/") for p in notes}
        assert w.stop(WAIT)


def test_a_file_link_follows_its_target_in_a_round_given_paths(tmp_path):
    vault = write_vault(tmp_path / "vault", NOTES)
    (vault / "Roses link.md").symlink_to(vault / "Garden/Roses.md")
    with fanout.open(tmp_path / "db", config=fast_cfg().replace(index={"stat_racy_s": 0})) as kb:
        w = kb.watch(vault)
        assert w.wait(1, WAIT) and w.last.error is None
        assert {"Roses link.md", "Garden/Roses.md"} <= indexed(kb)
        # the event names the target only: the link's note is read too (the watcher knows the vault's links)
        r = round_after(w, lambda: (vault / "Garden/Roses.md").write_text("# Roses\n\nRoses want marmalade.\n"))
        assert r.report.embedded_notes == 2
        assert sorted(found(kb, "marmalade")) == ["Garden/Roses.md", "Roses link.md"]
        assert w.stop(WAIT)
