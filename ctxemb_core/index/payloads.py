"""A record kept as a JSON payload beside its vector: where its parts are, and the store's order.

Qdrant keeps a point as a vector and a payload; a store of that kind (Weaviate's objects,
Milvus's entities and Elasticsearch's documents are alike) gives a driver two things to decide
that are no store's own:

- :class:`PayloadLayout`: which payload keys hold a record's id, text and metadata, both ways
  (ctxemb's and ``langchain-qdrant``'s ``page_content`` and ``metadata``; fastembed's
  ``document`` with the metadata spread beside it), for a driver and for a read-only view over
  a layout someone else wrote;
- :class:`SealedOrder`: ``ids``, ``page`` and the ids a filter selects, in the store's order,
  for a store that keeps none,
  from the write sequence :func:`~ctxemb_core.index.driver_kit.sealed` puts in each payload
  (:func:`~ctxemb_core.index.driver_kit.write_order`: oldest write first, a record written or
  edited around the driver last); and capability ``seals``: ``listed`` (the ids and the
  unproven ones, in one read) and ``seal``.

Example:
    >>> from ctxemb_core.index.driver import Record
    >>> PayloadLayout().payload(Record("d1", None, "Green tea is steamed.", {"n": 1}))
    {'ctxemb_id': 'd1', 'page_content': 'Green tea is steamed.', 'metadata': {'n': 1}}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxemb_core.index.driver import INCLUDE, Record
from ctxemb_core.index.driver_kit import resealed, write_order

__all__ = ["PayloadLayout", "SealedOrder"]


@dataclass(frozen=True)
class PayloadLayout:
    """Which payload keys hold a record's parts.

    Args:
        text: the key of the text (``page_content``; fastembed's ``document``).
        metadata: the key of the metadata mapping; ``None``: every key but the text's and the
            id's is metadata (as fastembed wrote it).
        id: the key of the ctxemb id; ``None``: none kept (the store's own key is the id).
    """

    text: str = "page_content"
    metadata: str | None = "metadata"
    id: str | None = "ctxemb_id"

    def payload(self, record: Record) -> dict[str, Any]:
        """``record``'s payload as a plain client writes it: id, text and metadata."""
        payload: dict[str, Any] = {} if self.id is None else {self.id: record.id}
        if record.text is not None:
            payload[self.text] = record.text
        if record.metadata is not None and self.metadata is None:
            payload.update(record.metadata)
        elif record.metadata is not None:
            payload[self.metadata] = dict(record.metadata)  # type: ignore[index]
        return payload

    def record(
        self, payload: Mapping[str, Any] | None, key: Any, vector: Any, include: frozenset[str]
    ) -> Record:
        """The record of a stored ``payload`` with the parts ``include`` names (``key``: the
        store's own, the id where the payload holds none; ``vector``: as read, ``None`` where
        none was read or none is stored)."""
        payload = payload or {}
        found = None if self.id is None else payload.get(self.id)
        meta: Any = None
        if "metadata" in include:
            if self.metadata is None:
                meta = {k: v for k, v in payload.items() if k not in (self.text, self.id)}
            else:
                meta = payload.get(self.metadata)
            # A payload's metadata is a dict (JSON): the exact type is tested first, a
            # search's hits pass here one by one.
            meta = dict(meta) if type(meta) is dict or isinstance(meta, Mapping) else None
        return Record(
            found if type(found) is str else str(key if found is None else found),
            None if vector is None else np.asarray(vector, dtype=np.float32),
            payload.get(self.text) if "text" in include else None,
            meta,
        )

    def columns(
        self, payloads: Sequence[Mapping[str, Any] | None], keys: Sequence[Any]
    ) -> tuple[list[str], list[Any], list[Any]]:
        """The ids, texts and metadata of stored ``payloads`` (``keys``: the store's own), as
        :meth:`record` reads them, without a record each (a search's hits): a metadata mapping
        is the payload's own dict, not copied (a client's payloads are its fresh copies)."""
        ids: list[str] = []
        texts: list[Any] = []
        metas: list[Any] = []
        for payload, key in zip(payloads, keys, strict=True):
            payload = payload or {}
            found = None if self.id is None else payload.get(self.id)
            ids.append(found if type(found) is str else str(key if found is None else found))
            texts.append(payload.get(self.text))
            if self.metadata is None:
                meta: Any = {k: v for k, v in payload.items() if k not in (self.text, self.id)}
            else:
                meta = payload.get(self.metadata)
            if type(meta) is not dict:
                meta = dict(meta) if isinstance(meta, Mapping) else None
            metas.append(meta)
        return ids, texts, metas


class SealedOrder:
    """``ids``, ``page`` and ``_selected`` of a driver (a
    :class:`~ctxemb_core.index.driver_kit.KeyedDriver`)
    whose store keeps no order of its own and whose payloads are
    :func:`~ctxemb_core.index.driver_kit.sealed`: every record's payload read
    (:meth:`_payloads`), put in :func:`~ctxemb_core.index.driver_kit.write_order`, sliced.
    """

    def _payloads(self, where: Any = None) -> list[tuple[str, Any, Mapping[str, Any]]]:
        """Every record (matching the neutral filter ``where``) as its id, its key in the store
        and its payload, in any order."""
        raise NotImplementedError

    def _at(self, keys: Sequence[Any], include: frozenset[str]) -> list[Record]:
        """The records stored under ``keys``, in the order given."""
        raise NotImplementedError

    def _payloads_of(self, ids: Sequence[str]) -> list[tuple[str, Any, Mapping[str, Any]]]:
        """The records stored under ``ids`` as :meth:`_payloads` gives them, in any order."""
        raise NotImplementedError

    def _reseal(self, keys: Sequence[Any], seals: Sequence[Mapping[str, Any]]) -> bool:
        """Merge ``seals`` into the payloads stored under ``keys`` (the other keys kept);
        ``False``: this store's records are not the driver's to seal (nothing written)."""
        raise NotImplementedError

    def _ordered(self, where: Any = None) -> list[tuple[tuple[int, int, str], str, Any]]:
        """Every record of :meth:`_payloads` as its place, id and key, oldest write first."""
        found = [(write_order(p, str(key)), i, key) for i, key, p in self._payloads(where)]
        found.sort(key=lambda f: f[0])
        return found

    def _in_order(self, where: Any = None) -> list[tuple[str, Any]]:
        """The ids and keys of :meth:`_payloads`, oldest write first."""
        return [(i, key) for _, i, key in self._ordered(where)]

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        return [i for i, _ in self._in_order()[offset : None if limit is None else offset + limit]]

    def listed(self) -> tuple[list[str], list[str]]:
        """Every id in the store's order, and the ids whose seal does not hold (written or
        edited around the driver), in one read of the payloads."""
        found = self._ordered()
        return [i for _, i, _ in found], [i for place, i, _ in found if place[0]]

    def seal(self, ids: Sequence[str]) -> list[str]:
        """Seal the records of ``ids`` whose seal does not hold, as they are now; the ids
        sealed (in the order given, which their new sequence keeps)."""
        if not ids:
            return []
        by_id = {i: (key, p) for i, key, p in self._payloads_of(ids)}
        todo = [i for i in dict.fromkeys(ids) if i in by_id and write_order(by_id[i][1], "")[0]]
        if not todo:
            return []
        seals = resealed([by_id[i][1] for i in todo])
        return todo if self._reseal([by_id[i][0] for i in todo], seals) else []

    def _selected(self, handle: Any, ids: list[str] | None, where: Any) -> list[str]:
        """The stored ids among ``ids`` (``None``: all) that match ``where``, in the store's
        order (what a :class:`~ctxemb_core.index.driver_kit.KeyedDriver` deletes)."""
        wanted = None if ids is None else set(ids)
        return [i for i, _ in self._in_order(where) if wanted is None or i in wanted]

    def page(self, offset: int, limit: int, include: frozenset[str] = INCLUDE) -> list[Record]:
        return self._at([key for _, key in self._in_order()[offset : offset + limit]], include)
