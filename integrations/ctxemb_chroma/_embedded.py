"""An embedded Chroma store: its folder's file, the collections it holds (for the hints of
errors), its write mark, and its in-process systems (one per folder, however it is spelled)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Any

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.embedded import SqliteMarks, read_only, sequence_number

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


class SequenceMarks(SqliteMarks):
    """The write mark: the sequence numbers the store's own file keeps, read only (why they are
    a sound mark: ``docs/chroma.md``, "How the driver keeps the protocol")."""

    SEGMENT = "SELECT id FROM segments WHERE collection = ? AND scope = 'METADATA'"
    MARK = "SELECT seq_id FROM max_seq_id WHERE segment_id = ?"
    CHANGES = (
        "SELECT embedding_id FROM embeddings WHERE segment_id = ? AND seq_id > ? ORDER BY seq_id"
    )
    TABLES = frozenset({"segments", "max_seq_id", "embeddings"})

    @classmethod
    def of(cls, client: Any) -> SqliteMarks | None:
        """The marks of ``client``'s store, or ``None`` when it keeps none that ctxemb can read."""
        try:
            settings = client.get_settings()
        except Exception:
            return None
        if not settings.is_persistent or not settings.persist_directory:
            return None
        if str(getattr(settings, "chroma_api_impl", "")).endswith("FastAPI"):
            return None  # a server's client: its file is the server's
        return cls.at(Path(str(settings.persist_directory)) / STORE_FILE)


#: Per embedded API object (one per folder's system in this process), the write mark up to
#: which each collection's view is known to hold the folder: read from the file just before
#: that API's bindings were made again, or raised by this process's own writes through ctxemb.
_VIEWS: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
_VIEWS_LOCK = threading.Lock()


def view_holding(bindings: Any, index_id: str, mark: int) -> None:
    """Make this process's view of collection ``index_id`` hold every write up to ``mark``
    (the file's mark, just read), its bindings made again from the folder where it may not.

    Chroma loads a collection's vectors into each process once and never reloads what another
    process wrote afterwards (``docs/chroma.md``, "A stale view"), while the mark is read from
    the file, whoever wrote. An open that checked the records of such a view passed the old
    vectors of records another process had rewritten, and recorded the file's mark: every later
    open, in any process sharing the cache folder, then took those records as verified and
    served the rewritten vectors unchecked. So a view is vouched for only up to what this
    process saw, and made again (about 10 ms, then the collection's vectors reloaded on their
    next read) when the file holds writes it did not see. ``bindings`` ``None``: nothing to
    reload (a server's client, an in-memory store)."""
    if bindings is None:
        return
    with _VIEWS_LOCK:
        seen = _VIEWS.setdefault(bindings, {})
        if mark == 0 or seen.get(index_id, -1) >= mark:  # 0: nothing written, nothing to miss
            seen.setdefault(index_id, mark)
            return
        bindings.start()  # the folder as it is now: every write up to mark, and any since
        seen[index_id] = mark


def file_marks(folder: Path) -> dict[str, int]:
    """Each collection's write mark in ``folder``'s file (none: no file, or not Chroma's)."""
    query = (
        "SELECT s.collection, m.seq_id FROM segments s JOIN max_seq_id m ON m.segment_id = s.id "
        "WHERE s.scope = 'METADATA'"
    )
    path = folder / STORE_FILE
    if not path.is_file():
        return {}
    try:
        db = read_only(path)
        try:
            return {str(c): sequence_number(m) for c, m in db.execute(query)}
        finally:
            db.close()
    except sqlite3.Error:
        return {}


def new_view(bindings: Any, marks: dict[str, int]) -> None:
    """A system made in this process after ``marks`` were read: it has loaded nothing yet, so
    its view of each collection holds at least those (no reload for its first open)."""
    if bindings is not None:
        with _VIEWS_LOCK:
            _VIEWS.setdefault(bindings, {}).update(marks)


def view_wrote(bindings: Any, index_id: str, before: int, after: int, operations: int) -> None:
    """This process wrote ``operations`` records (each numbered once by the store) to
    ``index_id``, the file's mark ``before`` and ``after``: where its view held ``before`` and
    no other writer's numbers fell between, it holds ``after`` (its own writes are in it)."""
    if bindings is None:
        return
    with _VIEWS_LOCK:
        seen = _VIEWS.get(bindings)
        if seen is not None and seen.get(index_id) == before and after == before + operations:
            seen[index_id] = after


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
