"""Embedded Chroma's write mark: the sequence numbers its own SQLite file already keeps (read
only; why they are a sound mark: ``docs/chroma.md``, "How the driver keeps the protocol")."""

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
