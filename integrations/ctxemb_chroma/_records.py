"""Chroma's records: its rules for metadata, its columns, its ``where``, writing whole."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chromadb.api.models.Collection import Collection
from chromadb.api.types import validate_metadata

from ctxemb_chroma._store import translated
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.driver import Filter, Record
from ctxemb_core.index.driver_kit import check_values, chunks, columns_of

__all__ = ["check_metadatas", "chroma_where", "space_of", "write_whole"]

#: Chroma's columns in the order of a record.
_COLUMNS = ("ids", "embeddings", "documents", "metadatas")


def check_metadatas(ids: list[str], metadatas: list[Any] | None) -> None:
    """Chroma's checks of each metadata entry, its store's too, before anything is written."""
    for k, m in enumerate(metadatas or []):
        if m is None:
            continue
        where = f"metadatas[{k}] (id {ids[k]!r})"
        with translated(where):
            validate_metadata(m)
        for key in m:
            if not key or key[0] in "#$":
                raise InvalidInputError(
                    f"{where}: key {key!r} is reserved by Chroma (empty, or starting with # or $)"
                )
    check_values(ids, metadatas, "a Chroma server")


def write_whole(
    raw: Collection,
    step: int,
    records: Sequence[Record],
    held: Mapping[str, Record],
    replace: bool = True,
) -> int:
    """Write records whole, in chunks of ``step`` (``held``: the stored ones; ``docs/chroma.md``,
    "A write replaces records whole"); ``replace=False``: add only. Returns the operations sent
    (the store numbers each: a record without text is deleted and added, two)."""
    columns = dict(zip(_COLUMNS, columns_of(records, "Chroma"), strict=True))
    if not replace:
        with translated("writing"):
            for part in chunks(len(columns["ids"]), step):
                raw.add(**{key: value[part] for key, value in columns.items()})
        return len(columns["ids"])
    texted: dict[str, list[Any]] = {k: [] for k in columns}
    untexted: dict[str, list[Any]] = {k: [] for k in columns}
    for k, i in enumerate(columns["ids"]):
        meta = columns["metadatas"][k]
        target = untexted
        if columns["documents"][k] is not None:
            target = texted
            stored = held[i].metadata if i in held else None
            stale = {key: None for key in stored or {} if key not in (meta or {})}
            meta = {**(meta or {}), **stale} or None
        for key in columns:
            target[key].append(meta if key == "metadatas" else columns[key][k])
    with translated("writing"):
        for part in chunks(len(untexted["ids"]), step):
            raw.delete(ids=untexted["ids"][part])
        for write, batch in ((raw.upsert, texted), (raw.add, untexted)):
            for part in chunks(len(batch["ids"]), step):
                write(**{key: value[part] for key, value in batch.items()})
    return len(texted["ids"]) + 2 * len(untexted["ids"])


def chroma_where(given: Filter | None) -> dict[str, Any] | None:
    """The neutral filter ``{key: value}`` as Chroma's ``where`` (``$and`` takes two or more)."""
    if not given:
        return None
    terms: list[dict[str, Any]] = [{k: {"$eq": v}} for k, v in given.items()]
    return terms[0] if len(terms) == 1 else {"$and": terms}


def space_of(raw: Collection) -> str:
    """The distance Chroma searches the collection by (its default, ``l2``, when none is set)."""
    config = raw.configuration_json or {}
    index = config.get("hnsw") or config.get("spann") or {}
    space = index.get("space") if isinstance(index, Mapping) else None
    return str(space or "l2")
