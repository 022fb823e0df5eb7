"""Writing a batch to Chroma in chunks, and putting the records back exactly if it fails."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from chromadb.api.models.Collection import Collection
from chromadb.api.types import validate_metadata

from ctxemb_chroma._store import translated
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import undoable_write


def check_metadatas(ids: list[str], metadatas: list[Any] | None) -> None:
    """Chroma's checks of each metadata entry, and the ones its store makes only while writing
    (a later chunk would fail after earlier ones were written), before anything is written."""
    for k, m in enumerate(metadatas or []):
        if m is None:
            continue
        where = f"metadatas[{k}] (id {ids[k]!r})"
        with translated(where):
            validate_metadata(m)
        for key, value in m.items():
            if not key or key[0] in "#$":
                raise InvalidInputError(
                    f"{where}: key {key!r} is reserved by Chroma (empty, or starting with # or $)"
                )
            for v in value if isinstance(value, list) else [value]:
                if _unstorable(v):
                    raise InvalidInputError(
                        f"{where}: {key!r} = {v!r} cannot be stored by a Chroma server (None, "
                        "a non-finite float or an integer beyond 64 bits); leave it out"
                    )


def _unstorable(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63


def chunks(count: int, step: int) -> Iterator[slice]:
    """Slices of at most ``step`` items (Chroma refuses a write above its max batch size)."""
    for start in range(0, count, max(1, step)):
        yield slice(start, start + max(1, step))


def write_chunks(
    write: Callable[..., Any],
    step: int,
    ids: list[str],
    vectors: Any,
    documents: Sequence[str],
    metadatas: list[Any] | None,
) -> None:
    with translated("writing"):
        for part in chunks(len(ids), step):
            write(
                ids=ids[part],
                embeddings=vectors[part],
                documents=list(documents[part]),
                metadatas=metadatas[part] if metadatas else None,
            )


def restore(
    raw: Collection,
    step: int,
    ids: list[str],
    before: Mapping[str, Any],
    written: list[Any] | None,
) -> None:
    """Put the records of ``ids`` back as ``before`` (a ``get`` of them) holds them.

    Ids that ``before`` lacks are deleted. Chroma's upsert *merges* a record's metadata, so the
    keys the failed write brought in are sent as ``None`` (Chroma's "remove this key"). An
    upsert cannot take a document away, so a record stored without text is deleted and added
    back as it was. Every call is chunked to the store's max batch size.
    """
    brought = {i: m for i, m in zip(ids, written or [], strict=False) if m}
    old = before["ids"]
    kept = set(old)
    again: dict[str, list[Any]] = {"ids": [], "embeddings": [], "documents": [], "metadatas": []}
    untexted: dict[str, list[Any]] = {k: [] for k in again}
    for k, i in enumerate(old):
        meta = before["metadatas"][k]
        target = untexted
        if before["documents"][k] is not None:
            target = again
            stale = {key: None for key in brought.get(i, {}) if key not in (meta or {})}
            # Removing every key leaves no metadata, as before; Chroma refuses an empty dict.
            meta = {**(meta or {}), **stale} or None
        target["ids"].append(i)
        target["embeddings"].append(before["embeddings"][k])
        target["documents"].append(before["documents"][k])
        target["metadatas"].append(meta)
    remove = [i for i in ids if i not in kept] + untexted["ids"]
    with translated("undoing a failed write"):
        for part in chunks(len(remove), step):
            raw.delete(ids=remove[part])
        for write, records in ((raw.upsert, again), (raw.add, untexted)):
            for part in chunks(len(records["ids"]), step):
                write(**{key: value[part] for key, value in records.items()})


def write_undoable(
    raw: Collection,
    step: int,
    upsert: bool,
    ids: list[str],
    vectors: Any,
    documents: Sequence[str],
    metadatas: list[Any] | None,
    before: Mapping[str, Any],
) -> None:
    """Write (add or upsert) in chunks; on failure or interrupt put ``before`` back exactly."""
    write = raw.upsert if upsert else raw.add
    undoable_write(
        lambda: write_chunks(write, step, ids, vectors, documents, metadatas),
        lambda: restore(raw, step, ids, before, metadatas),
        ids,
    )
