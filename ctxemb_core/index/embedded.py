"""An embedded store: a folder of files one process opens, and the SQLite file it keeps there.

What a driver of an embedded store (Chroma's ``PersistentClient``; any store kept in a folder)
needs that is no store's own:

- :func:`opening_folder`: a folder made for a store safely: missing parents created, checked
  writable, held under an advisory lock while the store opens (processes opening a new store
  at once race on its schema), and what this call created removed if opening fails;
- :func:`store_folder`: the folder a caller names, checked (a path, not a file; with
  ``create=False``, one that holds a store);
- :func:`folders_near`: the store folders beside or inside a mistyped one, for an error's hint,
  :func:`require_store`, the refusal of a folder that holds no store, naming them, and
  :func:`missing_index`, the refusal of an index the store lacks, naming a near name or a
  store near it that holds one of that name;
- :func:`read_only`: a store's SQLite file opened read-only (ctxemb never writes a store's own
  tables);
- :class:`FolderClients` and :func:`held_elsewhere`: for a store whose client locks its folder
  for its life (Qdrant's local mode), one client per folder in this process, joined by every
  opener, and a folder another process holds refused before the store reads it;
- :class:`SqliteMarks`: a write mark (:meth:`~ctxemb_core.index.driver.StoreDriver.changes`)
  read from the sequence numbers a store's SQLite file gives its writes, and what this
  process's own view of each index holds of them (a store that loads an index into each
  process once and never reloads another process's writes).

Example:
    >>> from pathlib import Path
    >>> folders_near(Path("/nonexistent/x"), lambda p: False)
    []
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shlex
import shutil
import signal
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

from ctxemb_core.errors import InvalidInputError, StoreUnavailableError

#: A store's client.
C = TypeVar("C")

__all__ = [
    "FolderClients",
    "SqliteMarks",
    "alive",
    "first_missing",
    "folders_near",
    "held_elsewhere",
    "helper_main",
    "locked",
    "missing_index",
    "opening_folder",
    "read_only",
    "require_store",
    "run_helper",
    "sequence_number",
    "store_folder",
]


def read_only(path: Path, timeout: float = 30) -> sqlite3.Connection:
    """``path``'s SQLite database opened read-only (usable from any thread)."""
    uri = f"{path.absolute().as_uri()}?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)


def folders_near(folder: Path, is_store: Callable[[Path], bool]) -> list[Path]:
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


def require_store(
    folder: Path,
    is_store: Callable[[Path], bool],
    held: Callable[[Path], list[str]],
    store: str,
    indexes: str = "indexes",
) -> None:
    """Refuse a folder that holds no ``store`` store (``InvalidInputError``), naming it and the
    nearest folder that holds one with what that one holds (``held``: the names of its
    ``indexes``, in the store's word)."""
    if is_store(folder):
        return
    why = f"the folder holds no {store} store" if folder.is_dir() else "there is no such folder"
    near = folders_near(folder, is_store)
    hint = ""
    if near:
        names = held(near[0])
        what = f" ({indexes}: {', '.join(map(repr, names))})" if names else ""
        hint = f"; did you mean {str(near[0])!r}?{what}"
    raise InvalidInputError(
        f"no {store} store at {str(folder)!r}: {why}, and nothing was created{hint} (a store "
        "is created by indexing into it)"
    )


def store_folder(
    path: Any,
    default: str,
    store: str,
    is_store: Callable[[Path], bool],
    held: Callable[[Path], list[str]],
    *,
    create: bool,
    indexes: str = "indexes",
) -> Path:
    """The folder of an embedded ``store`` that ``path`` names (``None``: ``default``; ``~``
    expanded, the spelling kept otherwise), or refused: not a path (``InvalidInputError``), a
    file (``StoreUnavailableError``), and with ``create=False`` a folder that holds no store
    (:func:`require_store`, which ``is_store`` and ``held`` serve)."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise InvalidInputError(f"path must be a folder path, got {path!r}")
    folder = Path(os.path.expanduser(os.fspath(path or default)))
    if folder.exists() and not folder.is_dir():
        raise StoreUnavailableError(f"{str(folder)!r} is a file, not a folder")
    if not create:
        require_store(folder, is_store, held, store, indexes)
    return folder


def missing_index(
    kind: str,
    name: str,
    names: list[str],
    folder: Path | None,
    is_store: Callable[[Path], bool],
    held: Callable[[Path], list[str]],
    python: str = "",
) -> InvalidInputError:
    """The refusal of ``kind`` ``name``, which the store lacks: naming a similar one of its
    ``names``, else (for a store in ``folder``) a store near it that holds one called ``name``,
    with how to reach it (``connect(path)``; ``--path`` on the command line). ``python``: more
    of why, for the Python message."""
    names = [n for n in names if not n.startswith(OWN_PREFIX)]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else _held(kind, names)
    near = folders_near(folder, is_store) if folder is not None and not close else []
    there = next((p for p in near if name in held(p)), None)
    if folder is not None and there is not None:  # e.g. the demo's index looked for elsewhere
        gone = f"{kind} {name!r} does not exist in {str(folder)!r}"
        found = f"; the store at {str(there)!r} holds a {kind} {name!r}"
        return InvalidInputError(
            f"{gone}{python}{found}: connect({str(there)!r}) to use it",
            cli=f"{gone}{found}: give --path {shlex.quote(str(there))}",
        )
    return InvalidInputError(
        f"{kind} {name!r} does not exist{python}{hint}",
        cli=f"{kind} {name!r} does not exist in this store{hint}",
    )


#: The names of ctxemb's own records in a store (an alias's claims: ``aliases.ClaimBook``),
#: never offered as the user's indexes.
OWN_PREFIX = "ctxemb-alias--"


def _held(kind: str, names: list[str]) -> str:
    """What the store holds instead, for a name with no near one (the first twenty)."""
    if not names:
        return f"; the store holds no {kind}"
    shown = ", ".join(repr(n) for n in sorted(names)[:20])
    return f"; the store holds {shown}" + (" and more" if len(names) > 20 else "")


def first_missing(folder: Path) -> Path | None:
    """The outermost of ``folder`` and its parents that does not exist (what making it makes)."""
    missing = None
    for p in [folder, *folder.absolute().parents]:
        if p.exists():
            break
        missing = p
    return missing


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on file ``path`` (made if missing) while the block runs."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def held_elsewhere(lock_file: Path) -> bool:
    """Whether another process holds the exclusive lock on ``lock_file``, the one a store's
    client takes on its folder for its life: asked before the store opens, where its client
    would read every index first and take the lock last (and keep the file open when
    refused)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks (the store refuses)
        return False
    if not lock_file.is_file():
        return False
    with open(lock_file, "r+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


class FolderClients(Generic[C]):
    """One client per store folder in this process, for a store whose client locks its folder
    for its life (Qdrant's local mode): a second client of the folder would be refused by the
    first, so every opener of the folder joins the one open.

    Example:
        >>> clients = FolderClients[object]()
        >>> one = clients.joined(Path("/tmp/x"), object, lambda client: False)
        >>> clients.joined(Path("/tmp/x"), object, lambda client: False) is one
        True
    """

    def __init__(self) -> None:
        self._open: dict[Path, C] = {}
        self._lock = threading.Lock()

    def joined(self, folder: Path, opened: Callable[[], C], closed: Callable[[C], bool]) -> C:
        """The client of ``folder`` open in this process (one not ``closed``), else the one
        ``opened`` makes now, kept for the next opener (two threads at once share one)."""
        with self._lock:
            held = self._open.get(folder)
            if held is not None and not closed(held):
                return held
            client = self._open[folder] = opened()
            return client


@contextlib.contextmanager
def opening_folder(folder: Path) -> Iterator[None]:
    """Make ``folder`` (and its missing parents), check it is writable, and hold its lock
    (``.ctxemb-open.lock``) while the block opens the store; if anything fails, what this call
    created is removed and the error raised."""
    created = first_missing(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".ctxemb-write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
        with locked(folder / ".ctxemb-open.lock"):
            yield
    except Exception:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)  # only what this call created
        raise


def sequence_number(value: Any) -> int:
    """A sequence number as SQLite holds it: an integer, or 8 big-endian bytes."""
    if isinstance(value, bytes | bytearray | memoryview):
        return int.from_bytes(bytes(value), "big")
    return int(value)


#: Per view (a store's in-process system: the object :meth:`SqliteMarks.view_of` names), the
#: write mark up to which each index's view is known to hold the file (:meth:`SqliteMarks.vouched`).
_VIEWS: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
_VIEWS_LOCK = threading.Lock()


class SqliteMarks:
    """Read-only access to the write numbers of one store's SQLite file.

    A store that numbers every write from one sequence (one SQLite writer at a time: commit
    order) and keeps, per record, the number of its last write and, per index, the highest
    number applied, has a write mark: the index's highest number, and ``changes(m)`` the
    records numbered above ``m``. A write is numbered and applied in that order, so one applied
    after a mark was read is listed by ``changes(mark)``; when the mark has not moved since
    ``m``, ``changes`` reads the mark alone. A subclass gives the store's queries, each taking
    the index's segment (the part of the file that holds its records).
    """

    #: The index's segment by the index's id; a segment's highest number; a segment's ids
    #: numbered above a mark, oldest first; each index's id and highest number; the tables
    #: these need.
    SEGMENT = ""
    MARK = ""
    CHANGES = ""
    EVERY = ""
    TABLES: frozenset[str] = frozenset()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._segments: dict[str, str] = {}  # index id -> its segment's id

    @classmethod
    def at(cls, path: Path) -> SqliteMarks | None:
        """The marks of the file at ``path``, or ``None`` when there is none with the tables."""
        if not path.is_file():
            return None
        marks = cls(path)
        try:
            with marks._lock:
                names = {r[0] for r in marks._db().execute("SELECT name FROM sqlite_master")}
        except sqlite3.Error:
            return None
        return marks if names >= cls.TABLES else None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = read_only(self.path.resolve())
        return self._conn

    def _segment(self, index_id: str) -> str | None:
        segment = self._segments.get(index_id)
        if segment is None:
            row = self._db().execute(self.SEGMENT, (index_id,)).fetchone()
            if row is None:
                return None
            segment = self._segments[index_id] = str(row[0])
        return segment

    def mark(self, index_id: str) -> int | None:
        """The highest number the index's records have taken (0: none yet); ``None`` when the
        file does not know the index (then no mark is claimed)."""
        with self._lock:
            segment = self._segment(index_id)
            if segment is None:
                return None
            row = self._db().execute(self.MARK, (segment,)).fetchone()
        return 0 if row is None or row[0] is None else sequence_number(row[0])

    def changes(self, index_id: str, since: int) -> list[str]:
        """Ids of the records whose last write is numbered above ``since``, oldest first."""
        with self._lock:
            segment = self._segment(index_id)
            if segment is None:
                return []
            mark = self._db().execute(self.MARK, (segment,)).fetchone()
            if mark is None or mark[0] is None or sequence_number(mark[0]) <= since:
                return []  # nothing numbered since: no scan of the segment's rows
            rows = self._db().execute(self.CHANGES, (segment, since)).fetchall()
        return [str(r[0]) for r in rows]

    def data_version(self) -> int | None:
        """A number that moves whenever anything was committed to the file since the last
        call, by any connection but this object's own (which only reads): the store itself,
        in this process or another (SQLite's ``PRAGMA data_version``). ``None``: unreadable."""
        with self._lock:
            try:
                return int(self._db().execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- this process's view of each index ----------------------------------------------------

    @staticmethod
    def view_of(handle: Any) -> Any:
        """The view (the in-process system that loaded the store) behind ``handle``, an index's
        handle or a client; ``None``: none that could be stale (a subclass's store says)."""
        return None

    @staticmethod
    def reload(view: Any) -> None:
        """Make ``view`` again from the file (every write up to now, and any since)."""

    def vouched(self, index_id: str, handle: Any) -> int | None:
        """:meth:`mark`, with this process's view of the index (``view_of(handle)``) made to
        hold every write up to it.

        A store that loads an index into each process once and never reloads what another
        process wrote afterwards (embedded Chroma: ``docs/chroma.md``, "A stale view") serves
        each process its own view, while the mark is read from the file, whoever wrote. An
        open that checked the records of a stale view passed the old vectors of records
        another process had rewritten, and recorded the file's mark: every later open, in any
        process sharing the cache folder, then took those records as verified and served the
        rewritten vectors unchecked. So a view is vouched for only up to what this process
        saw, and made again (:meth:`reload`) when the file holds writes it did not see.
        """
        mark = self.mark(index_id)
        view = None if mark is None else self.view_of(handle)
        if mark is None or view is None:
            return mark
        with _VIEWS_LOCK:
            seen = _VIEWS.setdefault(view, {})
            if mark == 0 or seen.get(index_id, -1) >= mark:  # 0: nothing written to miss
                seen.setdefault(index_id, mark)
            else:
                self.reload(view)
                seen[index_id] = mark
        return mark

    def wrote(self, index_id: str, handle: Any, write: Callable[[], int]) -> None:
        """Run ``write``, this process's write to the index, which returns how many record
        operations it sent (each numbered once by the store): where the view held the mark
        before and no other writer's numbers fell between, it holds the mark after (its own
        writes are in it: no reload for them)."""
        before = self.mark(index_id)
        operations = write()
        after = self.mark(index_id)
        view = self.view_of(handle)
        if view is None or before is None or after is None:
            return
        with _VIEWS_LOCK:
            seen = _VIEWS.get(view)
            if seen is not None and seen.get(index_id) == before and after == before + operations:
                seen[index_id] = after

    @classmethod
    def new_view(cls, path: Path, make: Callable[[], C]) -> C:
        """``make()``, a client whose view of the store at ``path`` is made now and has loaded
        nothing yet: it holds at least every index's mark read just before (no reload for its
        first open)."""
        marks: dict[str, int] = {}
        with contextlib.suppress(sqlite3.Error):
            if path.is_file():
                with contextlib.closing(read_only(path)) as db:
                    marks = {str(i): sequence_number(m) for i, m in db.execute(cls.EVERY)}
        client = make()
        view = cls.view_of(client)
        if view is not None:
            with _VIEWS_LOCK:
                _VIEWS.setdefault(view, {}).update(marks)
        return client


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (another user's counts): a folder's holder gone?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def run_helper(start: Callable[[], tuple[str, list[str]]]) -> int:
    """Run a local server helper (``python -m <adapter>.server DIR``) until Ctrl-C, SIGTERM or
    SIGHUP; returns its exit status. ``start()`` starts or joins the server and returns its
    address and what to say first: said on stderr, then the address alone on stdout, so a
    caller that acts on the address at once has been told everything. SIGTERM and SIGHUP would
    end Python without its exit handlers (where a helper library stops its server): as Ctrl-C,
    they unwind instead."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)
    try:
        address, said = start()
        for line in said:
            print(line, file=sys.stderr, flush=True)
        print(address, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0


def helper_main(
    module: str, start: Callable[[str], tuple[str, list[str]]], argv: list[str] | None = None
) -> int:
    """``python -m MODULE DIR`` (``argv``: the arguments, by default the command line's):
    :func:`run_helper` of ``start(DIR)``, or the usage and status 2 for anything but one
    folder."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print(f"usage: python -m {module} DIR", file=sys.stderr)
        return 2
    return run_helper(lambda: start(argv[0]))
