"""What an embedded Chroma store is on disk, and the collections it holds, for the hints of
errors (:func:`ctxemb_core.index.embedded.missing_index`, ``require_store``)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from ctxemb_core.index.embedded import read_only

#: The file every embedded Chroma store keeps at the top of its folder.
STORE_FILE = "chroma.sqlite3"


def is_store(folder: Path) -> bool:
    return (folder / STORE_FILE).is_file()


def collections_in(folder: Path) -> list[str]:
    """The collection names an embedded store holds, read from its file without opening it in
    Chroma (no system started, nothing written); empty if it cannot be read."""
    with (
        contextlib.suppress(Exception),
        contextlib.closing(read_only(folder / STORE_FILE, 1)) as db,
    ):
        return sorted(str(n) for (n,) in db.execute("SELECT name FROM collections"))
    return []


def embedded_folder(client: Any) -> Path | None:
    """The folder of an embedded client, ``None`` for a server's or the in-memory store."""
    with contextlib.suppress(Exception):
        settings = client._system.settings
        if settings.is_persistent and settings.persist_directory:
            return Path(settings.persist_directory)
    return None
