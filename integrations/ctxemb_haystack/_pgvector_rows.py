"""What the pgvector guard of :mod:`._pgvector` translates: a Haystack filter into
``ctxemb_pgvector``'s ``where``, and the rows PostgreSQL would refuse, found before a write."""

from __future__ import annotations

import json
from typing import Any

from ctxemb_core.errors import InvalidInputError

#: Metadata values a ``meta.<key> == value`` filter becomes a containment test for.
_SCALARS = (str, int, float, bool)


def where_of(filters: dict[str, Any] | None) -> dict[str, Any] | None:
    """A Haystack filter of ``meta.<key> == value`` tests (alone or under ``AND``) as
    ``ctxemb_pgvector``'s ``where``; ``None`` for no filter or any other filter."""
    if not filters:
        return None
    conditions = filters.get("conditions") if filters.get("operator") == "AND" else [filters]
    if not isinstance(conditions, list) or not conditions:
        return None
    where: dict[str, Any] = {}
    for c in conditions:
        field = c.get("field") if isinstance(c, dict) else None
        if (
            c.get("operator") != "=="
            or not isinstance(field, str)
            or not field.startswith("meta.")
            or "." in field[5:]
            or not isinstance(c.get("value"), _SCALARS)
            or field[5:] in where
        ):
            return None
        where[field[5:]] = c["value"]
    return where


def check_storable(ids: list[str], texts: list[str], metas: list[dict[str, Any]]) -> None:
    """What PostgreSQL would refuse while writing, refused before the table is created."""
    for i, text, meta in zip(ids, texts, metas, strict=True):
        if "\x00" in text:
            raise InvalidInputError(
                f"document {i!r} holds a NUL character, which PostgreSQL text cannot store"
            )
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"document {i!r}: meta cannot be stored as JSON: {exc}"
            ) from None
