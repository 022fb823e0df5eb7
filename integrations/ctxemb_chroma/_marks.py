"""Embedded Chroma's write mark: the sequence numbers its own SQLite file already keeps.

Every write to a Chroma collection (add, upsert, update, delete) goes through the store's
write-ahead log, where it takes the next number of one sequence (``embeddings_queue.seq_id``,
one SQLite writer at a time, so the numbers are in commit order). The collection's metadata
segment applies each and keeps, per record, the number of its last write
(``embeddings.seq_id``) and, per segment, the highest number applied (``max_seq_id``). A raw
client's write is numbered like ctxemb's: this is the store's mark, not one ctxemb keeps.

So the collection's mark is its metadata segment's ``max_seq_id`` (one lookup by primary key),
and the records written after mark ``m`` are those whose ``seq_id`` is above ``m``. A write is
numbered and applied in that order, so one applied after a mark was read has a higher number
than that mark, and is listed by ``changes(mark)``. ``changes`` scans the segment's rows inside
SQLite (Chroma's table has no index on ``seq_id``): it returns only the changed ids, and no
Python object is made per unchanged record, unlike listing every id through Chroma's API; and
when the mark has not moved since ``m``, it reads the mark alone.

Only an embedded store has the file: a server's client (``HttpClient``), an in-memory client,
or a Chroma whose file lacks these tables (another schema version) keeps no mark, and its
driver declares ``marks=False`` (every id listed on open, as before). The file is opened
read-only: ctxemb never writes Chroma's own tables.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

__all__ = ["SequenceMarks"]

#: Chroma's database file in an embedded store's folder.
FILE = "chroma.sqlite3"
_SEGMENT = "SELECT id FROM segments WHERE collection = ? AND scope = 'METADATA'"
_MARK = "SELECT seq_id FROM max_seq_id WHERE segment_id = ?"
_CHANGES = "SELECT embedding_id FROM embeddings WHERE segment_id = ? AND seq_id > ? ORDER BY seq_id"
_TABLES = {"segments", "max_seq_id", "embeddings"}


def _number(value: Any) -> int:
    """A sequence number as Chroma stores it: an integer, or (older files) 8 big-endian bytes."""
    if isinstance(value, bytes | bytearray | memoryview):
        return int.from_bytes(bytes(value), "big")
    return int(value)


class SequenceMarks:
    """Read-only access to the sequence numbers of one embedded Chroma folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._segments: dict[str, str] = {}  # collection id -> its metadata segment's id

    @classmethod
    def of(cls, client: Any) -> SequenceMarks | None:
        """The marks of ``client``'s store, or ``None`` when it keeps none that ctxemb can read."""
        try:
            settings = client.get_settings()
        except Exception:
            return None
        if not settings.is_persistent or not settings.persist_directory:
            return None
        if str(getattr(settings, "chroma_api_impl", "")).endswith("FastAPI"):
            return None  # a server's client: its file is the server's
        path = Path(str(settings.persist_directory)) / FILE
        if not path.is_file():
            return None
        marks = cls(path)
        try:
            with marks._lock:
                names = {r[0] for r in marks._db().execute("SELECT name FROM sqlite_master")}
        except sqlite3.Error:
            return None
        return marks if names >= _TABLES else None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, timeout=30, check_same_thread=False)
        return self._conn

    def _segment(self, collection_id: str) -> str | None:
        segment = self._segments.get(collection_id)
        if segment is None:
            row = self._db().execute(_SEGMENT, (collection_id,)).fetchone()
            if row is None:
                return None
            segment = self._segments[collection_id] = str(row[0])
        return segment

    def mark(self, collection_id: str) -> int | None:
        """The highest sequence number the collection's records have taken (0: none yet);
        ``None`` when the file does not know the collection (then no mark is claimed)."""
        with self._lock:
            segment = self._segment(collection_id)
            if segment is None:
                return None
            row = self._db().execute(_MARK, (segment,)).fetchone()
        return 0 if row is None or row[0] is None else _number(row[0])

    def changes(self, collection_id: str, since: int) -> list[str]:
        """Ids of the records whose last write is numbered above ``since``, oldest first."""
        with self._lock:
            segment = self._segment(collection_id)
            if segment is None:
                return []
            mark = self._db().execute(_MARK, (segment,)).fetchone()
            if mark is None or mark[0] is None or _number(mark[0]) <= since:
                return []  # nothing numbered since: no scan of the segment's rows
            rows = self._db().execute(_CHANGES, (segment, since)).fetchall()
        return [str(r[0]) for r in rows]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
