"""Stored vectors (float32 rows) to and from the column's type: ``vector``, ``halfvec``, ``bit``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pgvector.psycopg import Bit, HalfVector


def to_column(vectors: np.ndarray, kind: str) -> list[Any]:
    """One value per row for a column of type ``kind`` (``bit``: ±1 → 1/0)."""
    rows = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    if kind == "bit":
        return [Bit(row > 0) for row in rows]
    if kind == "halfvec":
        return [HalfVector(row) for row in rows]
    return list(rows)


def from_column(values: Sequence[Any]) -> list[np.ndarray | None]:
    """The stored values as float32 rows (``bit`` as ±1; ``None``: none), by the column's own
    type whatever the stamp says: an altered column's values are given for the checks to judge."""
    out: list[np.ndarray | None] = []
    for value in values:
        if value is None:
            out.append(None)
        elif isinstance(value, Bit):
            out.append(value.to_numpy().astype(np.float32) * 2.0 - 1.0)
        elif isinstance(value, HalfVector):
            out.append(value.to_numpy().astype(np.float32))
        elif isinstance(value, str):  # a type pgvector's loaders do not know (altered column)
            out.append(_parse(value))
        else:
            out.append(np.asarray(value, dtype=np.float32))
    return out


def _parse(text: str) -> np.ndarray | None:
    text = text.strip()
    try:
        if text.startswith(("[", "{")):
            return np.array([float(v) for v in text[1:-1].split(",") if v], dtype=np.float32)
        if set(text) <= {"0", "1"}:
            return np.array([1.0 if c == "1" else -1.0 for c in text], dtype=np.float32)
    except ValueError:
        pass
    return None
