"""An embedded Chroma store: its folder's file, the collections it holds (for the hints of
errors), its write mark, and its in-process systems (one per folder, however it is spelled)."""

from __future__ import annotations

import contextlib
import os
import weakref
from pathlib import Path
from typing import Any

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.embedded import SqliteMarks, read_only

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
        server = str(getattr(settings, "chroma_api_impl", "")).endswith("FastAPI")
        if settings.is_persistent and settings.persist_directory and not server:
            return Path(settings.persist_directory)
    return None


def folder_bindings(owner: Any) -> Any:
    """The embedded API behind a folder store's client or collection (else ``None``)."""
    api = getattr(owner, "_server", None) or getattr(owner, "_client", None)
    if type(api).__name__ != "RustBindingsAPI":
        return None
    settings = getattr(getattr(api, "_system", None), "settings", None)
    return api if getattr(settings, "is_persistent", False) else None


class SequenceMarks(SqliteMarks):
    """The write mark: the sequence numbers the store's own file keeps, read only (why they are
    a sound mark: ``docs/chroma.md``, "How the driver keeps the protocol")."""

    SEGMENT = "SELECT id FROM segments WHERE collection = ? AND scope = 'METADATA'"
    MARK = "SELECT seq_id FROM max_seq_id WHERE segment_id = ?"
    CHANGES = (
        "SELECT embedding_id FROM embeddings WHERE segment_id = ? AND seq_id > ? ORDER BY seq_id"
    )
    EVERY = (
        "SELECT s.collection, m.seq_id FROM segments s JOIN max_seq_id m ON m.segment_id = s.id "
        "WHERE s.scope = 'METADATA'"
    )
    TABLES = frozenset({"segments", "max_seq_id", "embeddings"})

    # A folder's embedded API is a process's view (``docs/chroma.md``, "A stale view").
    @staticmethod
    def view_of(handle: Any) -> Any:
        return folder_bindings(handle)

    @staticmethod
    def reload(view: Any) -> None:
        view.start()

    @classmethod
    def of(cls, client: Any) -> SqliteMarks | None:
        """The marks of ``client``'s store, or ``None``: none ctxemb can read (a server's)."""
        folder = embedded_folder(client)
        return None if folder is None else cls.at(folder / STORE_FILE)


#: The real folder each embedded system was opened on (its name may be relative: a ``chdir``).
_OPENED_ON: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

#: Chroma's embedded implementations (its systems of any other kind are servers' clients).
_EMBEDDED = ("chromadb.api.segment.SegmentAPI", "chromadb.api.rust.RustBindingsAPI")


def shared_system(path: str) -> tuple[str, Any]:
    """The spelling of ``path`` whose system is open on its folder, and its settings (``None``:
    none; ``docs/chroma.md``, "Several processes on one folder")."""
    from chromadb.api.shared_system_client import SharedSystemClient

    real = os.path.realpath(os.path.expanduser(path))
    systems = dict(SharedSystemClient._identifier_to_system)
    for identifier, system in systems.items():
        settings = system.settings
        embedded = settings.is_persistent and settings.chroma_api_impl in _EMBEDDED
        if embedded and _OPENED_ON.get(system, os.path.realpath(identifier)) == real:
            return identifier, settings
    # This name is another folder's system (opened before a chdir): named absolutely instead.
    return (real if path in systems else path), None


def joinable(system_settings: Any, given: Any, path: str) -> Any:
    """Settings that join the system open on ``path``: its own, which must equal ``given``."""
    joined = system_settings.model_copy()
    if given is not None:
        given = given.model_copy(update={"persist_directory": path, "is_persistent": True})
        if given != joined:
            differ = sorted(
                k for k in type(joined).model_fields if getattr(given, k) != getattr(joined, k)
            )
            raise InvalidInputError(
                f"a Chroma client of {path!r} is already open in this process with other "
                f"settings ({', '.join(differ)} differ); open the folder with the same settings "
                "or none (they are then that client's)"
            )
    return joined


def opened_on(client: Any, path: str) -> None:
    """Record the real folder ``client``'s system was opened on (kept across a ``chdir``)."""
    _OPENED_ON.setdefault(client._system, os.path.realpath(path))
