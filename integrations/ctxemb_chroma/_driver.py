"""Chroma as a store driver: one collection under core's guard (how each promise is kept:
``docs/chroma.md``, "How the driver keeps the protocol").

Example:
    >>> from ctxemb_core.index import GuardedIndex
    >>> docs = GuardedIndex.open(ChromaDriver(client, "docs"), embedder)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

import numpy as np
from chromadb.api import ClientAPI
from chromadb.api.models.Collection import Collection

from ctxemb_chroma._embedded import SequenceMarks
from ctxemb_chroma._function import NAME, ContractEmbeddingFunction
from ctxemb_chroma._records import check_metadatas, chroma_where, space_of, write_whole
from ctxemb_chroma._store import (
    check_client,
    check_name,
    configured_function,
    kept_metadata,
    missing_collection,
    read_settled,
    store_address,
    stored_or_none,
    translated,
)
from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.contract import same_contract
from ctxemb_core.errors import MissingStampError, StampError
from ctxemb_core.guard import check_querier
from ctxemb_core.index import driver as protocol
from ctxemb_core.index.driver_kit import ObjectDriver, unstamped_refusal
from ctxemb_core.index.shaped import hits_in, named, records_in
from ctxemb_core.remedy import DEFAULT_TERMS

__all__ = ["ChromaDriver", "check_metadatas"]


class ChromaDriver(ObjectDriver[Collection]):
    """The :class:`~ctxemb_core.index.driver.StoreDriver` of one Chroma collection.

    Args:
        client: a ``chromadb`` client (embedded ``PersistentClient`` or ``HttpClient``).
        name: the collection's name (checked as Chroma would).
        embedder: whose configuration Chroma persists with a collection this driver creates
            or re-stamps under its contract (else the stamp's contract's defaults).

    Raises:
        InvalidInputError: not a chromadb client, or a name Chroma refuses.
        StoreUnavailableError: the store cannot be reached (its batch limit is read).
    """

    _kind = "collection"
    _no_marks = "only an embedded Chroma store has one"
    terms = DEFAULT_TERMS  # its errors' words (the default ones), whichever path reached it

    def __init__(self, client: ClientAPI, name: str, *, embedder: Embedder | None = None) -> None:
        self.client = check_client(client)
        self._name = check_name(name)
        self.embedder = check_querier(embedder)  # an Embedder or None
        self._marks = SequenceMarks.of(self.client)  # an embedded store's own numbers
        self.capabilities = self._capabilities()

    def _capabilities(self) -> protocol.Capabilities:
        """No transactions; an embedded store's mark; filters; the batch limit, read per head."""
        with translated("reading the store's batch limit"):
            step = int(self.client.get_max_batch_size())
        return protocol.Capabilities(
            transactions=False, marks=self._marks is not None, filters=True, max_batch=max(1, step)
        )

    def __repr__(self) -> str:
        return f"ChromaDriver({self._name!r}, store={self.describe()!r})"

    def describe(self) -> str:
        tenant = getattr(self.client, "tenant", "")
        database = getattr(self.client, "database", "")
        return f"chroma {store_address(self.client)} (tenant {tenant}, database {database})"

    def unstamped_error(self) -> MissingStampError:
        """The refusal of the collection unstamped: who likely wrote it."""
        raw = self._stored()
        function = None if raw is None else configured_function(raw)[0]
        by = (
            f"with another Chroma embedding function ({function!r}: Chroma's own, or a writer "
            "such as Haystack's DocumentWriter)"
            if function not in (None, NAME)
            else "around ctxemb (a plain chromadb or langchain_chroma.Chroma client, say)"
        )
        return unstamped_refusal("collection", self._name, by=by)

    def storage_for(self, stamp: IndexStamp) -> Mapping[str, Any] | None:
        return {"embedding_function": NAME, "contract": stamp.contract.to_dict()}

    # -- the collection and its stamp, as :class:`ObjectDriver` reads and writes them ------

    def _lookup(self) -> Collection | None:
        return stored_or_none(self.client, self._name)

    def missing_error(self, why: str = "") -> Exception:
        return missing_collection(self.client, self._name, why)

    def _identity(self, handle: Collection) -> str:
        return str(handle.id)

    def _metadata(self, handle: Collection) -> Mapping[str, Any] | None:
        return handle.metadata

    def _storage(self, handle: Collection) -> Mapping[str, Any]:
        function, contract = configured_function(handle)
        return {"embedding_function": function, "contract": contract}

    def _space(self, handle: Collection) -> str:
        return space_of(handle)

    def _live(self) -> tuple[object, Any] | None:
        """The store file and its data version (docs/chroma.md, "The head of an embedded store")."""
        version = None if self._marks is None else self._marks.data_version()
        return None if version is None else (self._marks, version)

    def _mark(self, handle: Collection) -> int | None:
        """The file's mark, this process's view made to hold it (``SqliteMarks.vouched``)."""
        return None if self._marks is None else self._marks.vouched(str(handle.id), handle)

    def _function(self, contract: EmbeddingContract) -> ContractEmbeddingFunction:
        given = self.embedder  # the persisted setting names the stamp's contract exactly
        if given is None or not same_contract(contract, given.contract, exact=True):
            given = Embedder(contract)
        return ContractEmbeddingFunction(given)

    def _create(self, stamp: IndexStamp) -> None:
        """The collection made stamped (``docs/chroma.md``, "How the driver keeps ...")."""
        function = self._function(stamp.contract)
        with translated(f"creating collection {self._name!r}"):
            self.client.create_collection(
                self._name,
                metadata=stamp.to_metadata(),
                embedding_function=function,  # type: ignore[arg-type]
                configuration={"hnsw": {"space": function.default_space(), "ef_search": 200}},
            )

    def _modify(self, handle: Collection, metadata: dict[str, Any], stamp: IndexStamp) -> None:
        # One modify; the old function's refusal comes after Chroma's save (docs/chroma.md).
        with translated(f"stamping {self._name!r}"), suppress(ValueError, StampError):
            handle.modify(
                metadata=kept_metadata(metadata),
                configuration={"embedding_function": self._function(stamp.contract)},
            )

    def head(self) -> protocol.Head | None:
        self.capabilities = self._capabilities()
        return super().head()

    # -- reading ------------------------------------------------------------------------------

    def count(self) -> int:
        raw = self._collection()
        with translated("count"):
            return int(read_settled(raw.count))

    def ids(self, offset: int = 0, limit: int | None = None) -> list[str]:
        raw = self._collection()
        with translated("reading ids"):
            return list(read_settled(raw.get, offset=offset, limit=limit, include=[])["ids"])

    def page(
        self, offset: int, limit: int, include: frozenset[str] = protocol.INCLUDE
    ) -> list[protocol.Record]:
        raw = self._collection()
        with translated("reading records"):
            got = read_settled(raw.get, offset=offset, limit=limit, include=named(include))
        return records_in(got, include)

    def check_batch(
        self, ids: list[str], documents: Sequence[str | None], metadatas: list[Any] | None
    ) -> None:
        check_metadatas(ids, metadatas)

    # -- the primitives :class:`~ctxemb_core.index.driver_kit.KeyedDriver` reads and writes by

    def _fetch(
        self, ids: list[str], include: frozenset[str], handle: Collection | None = None
    ) -> list[protocol.Record]:
        raw = handle or self._collection()
        with translated("reading records"):
            return records_in(read_settled(raw.get, ids=ids, include=named(include)), include)

    def _changes(self, since: int) -> list[str]:
        assert self._marks is not None
        return self._marks.changes(str(self._collection().id), since)

    def _put(
        self,
        handle: Collection,
        records: Sequence[protocol.Record],
        held: Mapping[str, protocol.Record],
        replace: bool,
    ) -> None:
        step = self.capabilities.max_batch or len(records)
        self._wrote(handle, lambda: write_whole(handle, step, records, held, replace))

    def _wrote(self, handle: Collection, write: Callable[[], int]) -> None:
        """``write``, whose writes are then in this process's view (``SqliteMarks.wrote``)."""
        if self._marks is None:
            write()
        else:
            self._marks.wrote(str(handle.id), handle, write)

    def _selected(
        self, handle: Collection, ids: list[str] | None, where: protocol.Filter | None
    ) -> list[str]:
        with translated("delete"):
            return list(
                read_settled(handle.get, ids=ids, include=[], where=chroma_where(where))["ids"]
            )

    def _remove(self, handle: Collection, ids: list[str]) -> None:
        def delete() -> int:
            with translated("delete"):
                handle.delete(ids=ids)
            return len(ids)

        self._wrote(handle, delete)

    def search(
        self, vector: np.ndarray, k: int, *, where: protocol.Filter | None = None
    ) -> list[protocol.Hit]:
        raw = self._collection()
        query = np.asarray(vector, dtype=np.float32).ravel()
        with translated("query"):
            got = read_settled(
                raw.query,
                query_embeddings=[query],
                n_results=k,
                where=chroma_where(where),
                include=["documents", "metadatas", "distances"],
            )
        return hits_in(got)  # Chroma's QueryResult, its lists read as given
