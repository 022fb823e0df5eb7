"""Embedded stores near a folder, and the collections they hold, for the hints of errors."""

from __future__ import annotations

import contextlib
import difflib
import os
import sqlite3
from pathlib import Path
from typing import Any

#: The file every embedded Chroma store keeps at the top of its folder.
STORE_FILE = "chroma.sqlite3"


def is_store(folder: Path) -> bool:
    return (folder / STORE_FILE).is_file()


def stores_near(folder: Path) -> list[Path]:
    """Store folders beside ``folder`` or inside it: similar names first, then those inside it,
    then the other ones beside it; shown relative to the working directory when ``folder`` was
    given that way."""
    here = folder.absolute()
    found: dict[str, Path] = {}
    with contextlib.suppress(OSError):
        for parent in (here.parent, here):
            for child in parent.iterdir() if parent.is_dir() else ():
                if child != here and is_store(child):
                    found.setdefault(child.name, child)
    close = [found[n] for n in difflib.get_close_matches(folder.name, list(found), cutoff=0.6)]
    inside = [p for p in found.values() if p.parent == here]
    ordered = dict.fromkeys([*close, *inside, *sorted(found.values())])
    return [p if folder.is_absolute() else Path(os.path.relpath(p)) for p in ordered]


def collections_in(folder: Path) -> list[str]:
    """The collection names an embedded store holds, read from its file without opening it in
    Chroma (no system started, nothing written); empty if it cannot be read."""
    with contextlib.suppress(Exception):
        uri = (folder / STORE_FILE).absolute().as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=1)) as db:
            return sorted(str(n) for (n,) in db.execute("SELECT name FROM collections"))
    return []


def holding(folder: Path, name: str) -> Path | None:
    """The first store near ``folder`` that holds a collection called ``name``."""
    return next((p for p in stores_near(folder) if name in collections_in(p)), None)


def embedded_folder(client: Any) -> Path | None:
    """The folder of an embedded client, ``None`` for a server's or the in-memory store."""
    with contextlib.suppress(Exception):
        settings = client._system.settings
        if settings.is_persistent and settings.persist_directory:
            return Path(settings.persist_directory)
    return None
