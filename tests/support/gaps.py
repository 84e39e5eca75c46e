"""A small vault, an answers log with answered and unanswered questions, and its index, for the gap report tests."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.vault import write_vault

NOTES = {
    "Sync/Set up sync.md": "# Set up sync\n\nSync keeps your vault the same on every device.\n\n## Sign in\n"
                           "Open Settings, Sync, sign in and choose a remote vault.\n",
    "Sync/Version history.md": "# Version history\n\nEvery file keeps its versions for a year; restore an older "
                               "version from the version history.\n",
    "Backups/Back up your vault.md": "# Back up your vault\n\nCopy the vault folder to another disk to make a "
                                     "backup.\n\n## Restore a backup\nCopy the backup folder back.\n",
    "Plugins/Install plugins.md": "# Install plugins\n\nBrowse community plugins, install a plugin and enable "
                                  "it.\n",
    "Appearance/Themes.md": "# Themes\n\nChange the theme: dark theme, light theme, community themes.\n",
    "Editing/Hotkeys.md": "# Hotkeys\n\nAssign hotkeys (keyboard shortcuts) to commands in the hotkeys "
                          "settings.\n",
    "Editing/Templates.md": "# Templates\n\nInsert a template into the current note; set the templates "
                            "folder.\n",
    "Search/Search notes.md": "# Search notes\n\nSearch your notes by words, tags and paths with the search "
                              "pane.\n",
    "Синхронизация/Настройка синхронизации.md": "# Настройка синхронизации\n\nСинхронизация хранит одинаковое "
                                                 "хранилище на всех устройствах. Откройте настройки и войдите.\n",
    "Редактор/Горячие клавиши.md": "# Горячие клавиши\n\nНазначьте горячие клавиши командам в настройках.\n",
}


ANSWERED = ["set up sync on every device", "restore an older version from version history",
            "install community plugins", "change the dark theme", "assign hotkeys to commands",
            "insert a template into a note", "настройка синхронизации хранилища"]


# off-topic for this vault: three topics, one of them Russian; some asked more than once
UNANSWERED = ["convert to microsoft word docx", "microsoft word docx converter", "convert to microsoft word docx",
              "billing invoice refund payment", "refund my billing payment invoice",
              "счёт оплата возврат денег подписка", "возврат денег за подписку оплата"]


LOG = [{"id": f"a{i}", "query": q} for i, q in enumerate(ANSWERED)] + \
      [{"id": f"u{i}", "query": q} for i, q in enumerate(UNANSWERED)] + [{"id": "bad", "query": ""}]


def index_vault_and_log(tmp: Path) -> tuple[Path, Path, Path, list[str]]:
    """NOTES written and indexed (fake profile, collection kb) and LOG as a query file: (vault, db, log,
    the common CLI arguments)."""
    from fanout.cli.main import main

    vault = write_vault(tmp / "vault", NOTES)
    db = tmp / "db"
    common = ["--db", str(db), "-c", "kb", "--config", "fake", "--runner", "inproc"]
    assert main(["index", str(vault), *common]) == 0
    log = tmp / "log.jsonl"
    log.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in LOG), encoding="utf-8")
    return vault, db, log, common
