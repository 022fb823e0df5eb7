"""Embedded Chroma's write mark: the sequence numbers its own SQLite file already keeps.

Every write to a Chroma collection (add, upsert, update, delete) goes through the store's
write-ahead log, where it takes the next number of one sequence (``embeddings_queue.seq_id``,
one SQLite writer at a time, so the numbers are in commit order). The collection's metadata
segment applies each and keeps, per record, the number of its last write
(``embeddings.seq_id``) and, per segment, the highest number applied (``max_seq_id``). A raw
client's write is numbered like ctxemb's: this is the store's mark, not one ctxemb keeps.

So the collection's mark is its metadata segment's ``max_seq_id`` (one lookup by primary key),
and the records written after mark ``m`` are those whose ``seq_id`` is above ``m``
(:class:`ctxemb_core.index.embedded.SqliteMarks` reads them). ``changes`` scans the segment's
rows inside SQLite (Chroma's table has no index on ``seq_id``): it returns only the changed
ids, and no Python object is made per unchanged record, unlike listing every id through
Chroma's API.

Only an embedded store has the file: a server's client (``HttpClient``), an in-memory client,
or a Chroma whose file lacks these tables (another schema version) keeps no mark, and its
driver declares ``marks=False`` (every id listed on open, as before). The file is opened
read-only: ctxemb never writes Chroma's own tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctxemb_chroma._neighbours import STORE_FILE
from ctxemb_core.index.embedded import SqliteMarks

__all__ = ["SequenceMarks"]


class SequenceMarks(SqliteMarks):
    """The sequence numbers of one embedded Chroma folder (its ``chroma.sqlite3``), read-only."""

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
