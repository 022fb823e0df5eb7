"""What a store that keeps a record's metadata as JSON refuses, decided once for every such store.

PostgreSQL keeps it in ``jsonb``, Qdrant in a point's payload: both filter by the neutral form
of :data:`~ctxemb_core.index.driver.Filter` and both fail part way through a batch on metadata
JSON has no form for. A driver states only its store's limits (the longest id, whether its text
can hold a NUL character) and calls these from its ``check_batch`` and its filter translation,
so every such store refuses the same input in the same words, before anything is embedded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ctxemb_core.errors import InvalidInputError

__all__ = ["check_json_batch", "json_filter"]


def json_filter(where: Any, store: str) -> dict[str, Any]:
    """The neutral filter ``where`` (every key holds its value) as plain JSON, or
    ``InvalidInputError``: an empty one, an operator key (``$and``, ``$in``: a store's own
    language, which the neutral form does not speak), a value JSON cannot hold."""
    if not isinstance(where, Mapping) or not where:
        raise InvalidInputError(
            f"where must be a non-empty mapping of metadata values, got {where!r}"
        )
    operators = [k for k in where if str(k).startswith("$")]
    if operators:
        raise InvalidInputError(
            f"where: {operators[0]!r}: {store} filters by metadata equality "
            "({'topic': 'tea', 'year': 2024}: every key holds its value); query the store "
            "with its own client for anything else"
        )
    try:
        return dict(json.loads(json.dumps(dict(where), allow_nan=False)))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"where is not JSON: {exc}") from None


def check_json_batch(
    ids: Sequence[str],
    documents: Sequence[str | None],
    metadatas: Sequence[Any] | None,
    store: str,
    *,
    max_id: int | None = None,
    nul: bool = True,
) -> None:
    """Refuse a batch ``store`` would refuse only while writing it: an id longer than
    ``max_id``, a NUL character where ``nul`` is ``False`` (in an id, a text or the metadata),
    metadata that is not JSON (a non-finite float, a key that is not a string, a value JSON
    has no form for)."""
    for k, i in enumerate(ids):
        if max_id is not None and len(i) > max_id:
            raise InvalidInputError(
                f"ids[{k}] is {len(i)} characters; the id column holds {max_id}"
            )
        if not nul and "\x00" in i:
            raise InvalidInputError(f"ids[{k}] holds a NUL character, which {store} cannot store")
    for k, d in enumerate(documents):
        if not nul and d is not None and "\x00" in d:
            raise InvalidInputError(
                f"documents[{k}] (id {ids[k]!r}) holds a NUL character, which {store} text "
                "cannot store; remove it"
            )
    for k, m in enumerate(metadatas or []):
        if m is None:
            continue
        where = f"metadatas[{k}] (id {ids[k]!r})"
        try:
            text = json.dumps(m, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"{where} cannot be stored as JSON: {exc}") from None
        if not nul and "\\u0000" in text:
            raise InvalidInputError(f"{where} holds a NUL character, which {store} cannot store")
        bad = [key for key in m if not isinstance(key, str)]
        if bad:
            raise InvalidInputError(f"{where}: key {bad[0]!r} is not a string")
