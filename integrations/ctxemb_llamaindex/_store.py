"""A LlamaIndex vector store on ctxemb's guarded index, whatever the store beneath.

:class:`ContractVectorStore` is LlamaIndex's ``BasePydanticVectorStore`` over one
:class:`~ctxemb_core.index.GuardedIndex` (opened through a store's index facade, as the CLI
and the other frameworks open it): the stamp, the open-time checks, the all-or-nothing write,
the query checks are core's. What is LlamaIndex's own is translated here: nodes to records (the
text a node was embedded from, its metadata, and LlamaIndex's own node JSON, so a node comes
back whole) and back, ``MetadataFilters`` to the stores' equality filter, and the vectors
LlamaIndex passes without saying which model made them (:mod:`._origins`).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from ctxemb_core import Embedder, EmbeddingContract
from ctxemb_core.documents import check_fingerprint
from ctxemb_core.errors import InvalidArgumentsError, InvalidInputError, worded
from ctxemb_core.guard import check_count, check_query_vector
from ctxemb_core.index import GuardedIndex, IndexFacade, StoreDriver, stamped_contract
from ctxemb_core.records import refuse_foreign
from ctxemb_llamaindex import _origins
from ctxemb_llamaindex._embedding import ContractEmbedding
from ctxemb_llamaindex._nodes import node_record, stored_node, where_of


class ContractVectorStore(BasePydanticVectorStore):
    """A LlamaIndex vector store on a stamped index; a store's class opens it on its driver
    (:class:`~ctxemb_llamaindex.ContractChromaVectorStore`,
    :class:`~ctxemb_llamaindex.ContractPGVectorStore`).

    Every query and write is checked before it runs. A query vector must have been made by a
    :class:`ContractEmbedding` of the stamp's contract in the query role (one of another
    contract is refused, fields named); a node's vector by one in the document role (or,
    where this process did not make it, it must re-embed to the same vector under the
    contract). Nodes without a vector are embedded here. A node is stored with the text it
    was embedded from (``get_content(MetadataMode.EMBED)``, what the CLI and the other
    frameworks re-embed to verify it) and comes back as it went in.
    """

    stores_text: bool = True  # read through the property set below the class
    #: A store's class: its adapter's index object, driver class and ``open_hybrid``.
    _adapter: ClassVar[tuple[type[IndexFacade[Any, Any]], Callable[..., Any], Callable[..., Any]]]
    _facade: IndexFacade[Any, Any] = PrivateAttr()
    _embed: ContractEmbedding = PrivateAttr()
    _hybrid: Callable[..., Any] | None = PrivateAttr(default=None)

    def _open(
        self,
        facade: type[IndexFacade[Any, Any]],
        driver_for: Callable[[Embedder | None], StoreDriver],
        embed_model: ContractEmbedding | None,
        **options: Any,
    ) -> None:
        """Open (or create) the index of ``driver_for(embedder)`` under ``embed_model``'s
        contract, or, without one, the contract its stamp holds; ``options``:
        :class:`~ctxemb_core.index.OpenOptions`."""
        if embed_model is None:
            with self._worded(facade):
                contract = stamped_contract(driver_for(None))
            embed_model = ContractEmbedding(contract)
        elif not isinstance(embed_model, ContractEmbedding):
            raise TypeError(
                "a ctxemb vector store needs a ContractEmbedding (its contract is what the index "
                f"is checked against), got {type(embed_model).__name__}; "
                "use ContractEmbedding(model_name=...) or leave embed_model out to use the "
                "contract the index's stamp holds"
            )
        embedder = embed_model.embedder
        self._embed = embed_model
        with self._worded(facade):
            self._facade = facade.open(driver_for(embedder), embedder, **options)

    @contextlib.contextmanager
    def _worded(self, facade: Any = None) -> Iterator[None]:
        """Errors give their advice in the store's terms (its facade's), adopting as this
        class does (never as another framework would)."""
        terms = (facade or self._facade)._terms
        with worded(terms.adopting_in(f"in LlamaIndex {type(self).__name__}(..., adopt=True)")):
            yield

    def _open_store(
        self,
        client: Any,
        name: str,
        embed_model: ContractEmbedding | None,
        options: dict[str, Any],
        scope: dict[str, Any] | None = None,
    ) -> None:
        """:meth:`_open` over index ``name`` of the store adapter the class names
        (:attr:`_adapter`: its index object, its driver ``(client, name, *, embedder,
        **scope)`` and its ``open_hybrid``, which opens the hybrid index beside it with the
        same ``scope``, a PostgreSQL ``schema``, and ``sample``): every store the same way.
        ``options``: :func:`~ctxemb_core.index.store_opening`'s, checked before connecting."""
        facade, driver_type, open_hybrid = self._adapter
        scope = dict(scope or {})

        def driver(embedder: Embedder | None) -> StoreDriver:
            return driver_type(client, name, embedder=embedder, **scope)

        self._open(facade, driver, embed_model, **options)
        sample = options["sample"]
        self._hybrid = lambda **hybrid: open_hybrid(
            client, name, self.embed_model.embedder, sample=sample, **scope, **hybrid
        )

    def _open_hybrid(self, **options: Any) -> Any:
        """The hybrid index beside this store's (for ContractHybridRetriever.from_store)."""
        if self._hybrid is None:
            raise TypeError(
                f"{type(self).__name__} has no hybrid index (Chroma's, PostgreSQL's and "
                "Qdrant's stores do)"
            )
        return self._hybrid(**options)

    @property
    def index(self) -> GuardedIndex:
        """The guarded index this store reads and writes through."""
        return self._facade.index

    @property
    def embed_model(self) -> ContractEmbedding:
        """The embedding model of the index's contract (what :func:`load_index` uses)."""
        return self._embed

    @property
    def contract(self) -> EmbeddingContract:
        return self.index.contract

    @property
    def client(self) -> Any:
        """The store's own client (Chroma's client, PostgreSQL's connection)."""
        driver = self._facade.driver
        return getattr(driver, "client", None) or getattr(driver, "conn", None)

    # -- writing ----------------------------------------------------------------------------

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Write nodes (an upsert by node id), all or nothing; nodes without a vector are
        embedded here under the contract."""
        nodes = list(nodes)
        if not nodes:
            return []
        ids, texts, metas = zip(*(node_record(n) for n in nodes), strict=True)
        vectors = [n.embedding for n in nodes]
        with self._worded():
            given = [(i, t, v) for i, t, v in zip(ids, texts, vectors, strict=True) if v]
            self._check_documents(given)
            if len(given) < len(nodes):
                self.index.upsert(list(ids), list(texts), list(metas))
            else:
                fingerprint = self.contract.fingerprint
                self.index.add_embedded(
                    list(ids),
                    vectors,
                    list(texts),
                    list(metas),
                    fingerprint=fingerprint,
                    upsert=True,
                )
        return list(ids)

    def _check_documents(self, given: list[tuple[str, str, Any]]) -> None:
        """Refuse node vectors of another contract (fields named) or role; those this process
        did not make must re-embed to themselves under the contract."""
        unknown = []
        for node_id, text, vector in given:
            found = _origins.origin(vector)
            if found is None:
                unknown.append((node_id, text, vector))
                continue
            check_fingerprint(found[0], self.contract)
            if found[1] != "document":
                raise InvalidInputError(
                    f"node {node_id!r} carries a query vector; a node is embedded as a "
                    "document (get_text_embedding), never as a query"
                )
        if unknown:
            ids, texts, vectors = zip(*unknown, strict=True)
            refuse_foreign(self.index.embedder, ids, texts, [list(v) for v in vectors])

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete the nodes of one source document."""
        with self._worded():
            self.index.delete(where={"ref_doc_id": _text(ref_doc_id, "ref_doc_id")})

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        with self._worded():
            self.index.delete(node_ids, where=where_of(filters))

    def clear(self) -> None:
        """Delete every node (the index and its stamp stay)."""
        with self._worded():
            ids = self.index.ids()
            if ids:
                self.index.delete(ids)

    # -- reading ----------------------------------------------------------------------------

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        if node_ids is None or filters is not None:
            raise InvalidInputError("get_nodes reads nodes by node_ids (no filters)")
        with self._worded():
            found = self.index.get(node_ids)
        return [stored_node(r.id, r.text, r.metadata) for r in found]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` nearest nodes, their similarity under the contract (higher
        is nearer) and ids; the query vector checked first (present, finite, the contract's
        width, made under the contract in the query role)."""
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise InvalidInputError(
                f"query mode {query.mode.value!r}: a ctxemb store searches by its contract's "
                "vectors (mode 'default'); for hybrid retrieval see ctxemb's hybrid index"
            )
        if query.node_ids:
            raise InvalidInputError("query by node_ids is not supported; use get_nodes")
        k = check_count(query.similarity_top_k, "similarity_top_k")
        contract = self.contract
        where = where_of(query.filters, query.doc_ids)
        with self._worded():
            fingerprint = _query_origin(query.query_embedding, contract)
            vector = check_query_vector(query.query_embedding, contract.output_dim)
            found = self.index.query_vector(vector, k, fingerprint=fingerprint, where=where)
        return VectorStoreQueryResult(
            nodes=[stored_node(m.id, m.text, m.metadata) for m in found],
            similarities=[m.score for m in found],
            ids=[m.id for m in found],
        )


#: LlamaIndex's ``VectorStoreIndex.from_vector_store``, whose frame is looked for (below).
_BUILDER: Any = VectorStoreIndex.from_vector_store
_FROM_VECTOR_STORE = inspect.unwrap(_BUILDER.__func__).__code__


def _stores_text(self: ContractVectorStore) -> bool:
    """``stores_text`` (always true), read by LlamaIndex where it matters: when
    ``VectorStoreIndex.from_vector_store`` reads it, the ``embed_model`` given there (or
    ``Settings``') is checked against the stamp, before any index is returned.

    LlamaIndex hands a store nothing of the index being built on it; this read is the one call
    ``from_vector_store`` makes on the store, and its ``embed_model`` argument is in the calling
    frame. Nothing of LlamaIndex is replaced: the caller's argument is read, not changed. If a
    later LlamaIndex stops reading ``stores_text`` there, nothing is checked here and the first
    retrieve, query or ``insert_nodes`` still refuses the model (a test pins this read).
    """
    caller = sys._getframe(1)
    if caller.f_code is _FROM_VECTOR_STORE:
        given = caller.f_locals.get("embed_model")
        if given is None:
            given = Settings._embed_model  # what LlamaIndex falls back on (None: unset)
        if given is not None:
            _check_model(self, given, "VectorStoreIndex.from_vector_store")
    return True


# A property set after the class is made: pydantic would take one in the class body for the
# default of its ``stores_text`` field.
ContractVectorStore.stores_text = property(_stores_text)  # type: ignore[assignment]


def _check_model(store: ContractVectorStore, embed_model: Any, where: str) -> None:
    """Refuse an embedding model other than a ContractEmbedding of the store's contract."""
    if not isinstance(embed_model, ContractEmbedding):
        raise InvalidArgumentsError(
            f"{where} on a ctxemb vector store needs a ContractEmbedding of its contract (the "
            f"store refuses vectors any other model makes), got {type(embed_model).__name__}; "
            "use load_index(store), which takes the model from the index's stamp"
        )
    with store._worded():
        check_fingerprint(embed_model.fingerprint, store.contract)


def load_index(
    store: ContractVectorStore, embed_model: Any = None, **kwargs: Any
) -> VectorStoreIndex:
    """A ``VectorStoreIndex`` on ``store`` with the embedding model of its stamp's contract:
    LlamaIndex's ``VectorStoreIndex.from_vector_store(store, embed_model=...)``, with the model
    read from the index instead of remembered by its user. An ``embed_model`` given must be a
    :class:`ContractEmbedding` of that contract (another is refused, fields named).

    Example:
        >>> store = ContractChromaVectorStore("docs", persist_path="./db")  # doctest: +SKIP
        >>> retriever = load_index(store).as_retriever(similarity_top_k=3)  # doctest: +SKIP
    """
    if not isinstance(store, ContractVectorStore):
        raise TypeError(f"load_index opens a ctxemb vector store, got {type(store).__name__}")
    if embed_model is None:
        embed_model = store.embed_model
    _check_model(store, embed_model, "load_index")
    return VectorStoreIndex.from_vector_store(store, embed_model=embed_model, **kwargs)


def _query_origin(vector: Any, contract: EmbeddingContract) -> str:
    """The fingerprint the query vector was made under, if a ContractEmbedding made it."""
    found = _origins.origin(vector)
    if found is not None:
        check_fingerprint(found[0], contract)  # another contract's: the fields named
    if found is None:
        check_query_vector(vector, contract.output_dim, contract=contract)  # None, NaN, width
        raise InvalidInputError(
            "the query embedding was not made by a ContractEmbedding here, so nothing says "
            f"which model made it; the index is {contract.describe()}: query through "
            "load_index(store) (or embed_model=ContractEmbedding(contract=...) of that contract)"
        )
    if found[1] != "query":
        raise InvalidInputError(
            "the query embedding was made in the document role; queries are embedded with "
            "get_query_embedding (the contract's query role)"
        )
    return found[0]


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError(f"{name} must be a non-empty string, got {value!r}")
    return value
