"""The tiny EN+RU vault most tests index (NOTES) and write_vault, which writes it (or any notes) to a folder."""

from __future__ import annotations

from pathlib import Path

NOTES = {
    "Sync/Sync your notes.md": """---
aliases: [Obsidian Sync, Sync/Settings]
tags: sync
description: Keep notes in step across devices.
---
Sync keeps your vault the same on every device.

## Set up sync
Open **Settings > Sync**, sign in and choose a remote vault. Changes upload within seconds.

## Version history
Every file keeps its versions for 12 months; restore one from the file's version history.
""",
    "Editing/Code blocks.md": """---
aliases: Fenced code
---
# Code blocks

Wrap code in three backticks to make a fenced code block.

```bash
# this is a comment, not a heading
echo hello
```

## Syntax highlighting
Add the language name after the backticks, for example `python`, to colour the code.
""",
    "Linking/Internal links.md": """---
aliases:
  - Wikilinks
  - Linking/Old links
---
Link one note to another with [[Internal links|wikilinks]]: type `[[` and pick a note.

## Link to a heading
Add `#` and the heading after the note name: `[[Note#Heading]]`.
""",
    "Plugins/Daily notes.md": """---
aliases: []
---
The Daily notes plugin opens a note named after today's date. Set the date format and a template
for new daily notes in the plugin's settings.
""",
    "Синхронизация/Синхронизация заметок.md": """---
aliases: [Sync your notes]
---
Синхронизация хранит одинаковое хранилище на всех ваших устройствах.

## Настройка синхронизации
Откройте **Настройки > Синхронизация**, войдите в аккаунт и выберите удалённое хранилище.
""",
    "Рецепты/Блины.md": """---
aliases: Pancakes
---
Для блинов смешайте молоко, яйца и муку, дайте тесту постоять полчаса и жарьте на горячей сковороде.
""",
}


def write_vault(root: Path, notes: dict[str, str] = NOTES) -> Path:
    for rel, text in notes.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root
