"""A LangChain ``VectorStore`` on a stamped PostgreSQL table, through the ctxemb_pgvector guard."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from ctxemb_core.documents import TEXT_KEY
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import OPEN_SAMPLE, check_count, check_query_vector, storable
from ctxemb_core.validate import texts_from_iterable
from ctxemb_langchain._checks import without_text_digest
from ctxemb_langchain._embeddings import ContractEmbeddings, contract_embeddings
from ctxemb_langchain._retriever import GuardedStore
from ctxemb_pgvector import GuardedTable, connect, open_hybrid, open_table


class ContractPGVector(GuardedStore):
    """A LangChain vector store on a PostgreSQL + pgvector table stamped with the contract.

    The table is ``ctxemb_pgvector``'s (Haystack ``PgvectorDocumentStore``'s columns), created
    stamped or opened and verified, so a table written by the CLI, by Haystack or by this store
    opens through the others under the same contract; :class:`ContractEmbeddings` of another
    contract are refused (``ContractMismatchError``, fields named). Every call reads the stamp's
    version first; every write (an upsert, as LangChain's stores do) is one transaction.
    ``similarity_search_with_score`` gives the table's distance (cosine distance for a
    normalised contract: lower is nearer), as ``langchain_postgres.PGVectorStore`` does.

    Args:
        table_name: the table.
        embedding: :class:`ContractEmbeddings`.
        connection: a DSN (``postgresql://user@host/db``) or a ``ctxemb_pgvector.connect``
            connection.
        sample: stored rows re-embedded and compared when the table is opened.
        create: create the table (stamped) when it is missing.
        adopt: stamp an unstamped table once a sample of its rows proves it is the contract's.
        schema: the PostgreSQL schema.
        ef_search: the HNSW search breadth (at least ``k``).

    Example:
        >>> store = ContractPGVector("docs", ContractEmbeddings(contract), connection=dsn)
        >>> store.add_texts(["Green tea is steamed."])  # doctest: +SKIP
        >>> store.as_retriever(k=3).invoke("how is green tea made")  # doctest: +SKIP
    """

    def __init__(
        self,
        table_name: str,
        embedding: ContractEmbeddings,
        *,
        connection: Any,
        sample: int = OPEN_SAMPLE,
        create: bool = True,
        adopt: bool = False,
        schema: str = "public",
        ef_search: int = 200,
    ) -> None:
        self._embeddings = contract_embeddings(embedding)
        self._owned = isinstance(connection, str)
        conn = connect(connection) if isinstance(connection, str) else connection
        self.table: GuardedTable = open_table(
            conn,
            table_name,
            self._embeddings.embedder,
            create=create,
            adopt=adopt,
            sample=sample,
            schema=schema,
            ef_search=ef_search,
        )

    @property
    def embeddings(self) -> Embeddings:
        return self._embeddings

    def close(self) -> None:
        """Close the connection, if this store opened it from a DSN."""
        if self._owned:
            self.table.conn.close()

    def _open_hybrid(self, **options: Any) -> Any:
        # For ContractHybridRetriever.from_store: the table's hybrid index, opened by
        # ctxemb_pgvector as the CLI opens it (lexical_path required there).
        table = self.table
        return open_hybrid(
            table.conn,
            table.name,
            self._embeddings.embedder,
            sample=table.sample,
            schema=table.schema,
            ef_search=table.ef_search,
            **options,
        )

    # -- writing -----------------------------------------------------------------------------

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed under the contract and upsert, in one transaction (nothing written on error)."""
        texts = texts_from_iterable(texts)
        given = list(ids) if ids is not None else []
        ids = [
            given[k] if k < len(given) and given[k] else str(uuid.uuid4())
            for k in range(len(texts))
        ]
        metas: list[Any] | None = None
        if metadatas:
            metas = [without_text_digest(m) for m in metadatas]
            metas += [None] * (len(texts) - len(metadatas))
        if not texts:
            return []
        self.table.add_embedded(
            ids,
            self._embeddings.embed_documents(texts),
            texts,
            metas,
            fingerprint=self._embeddings.fingerprint,
            upsert=True,
        )
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete the rows of these ids (ids not stored are no error)."""
        if ids is None:
            raise InvalidInputError("delete needs ids; ContractPGVector never deletes everything")
        if list(ids):
            self.table.delete(list(ids))
        return True

    # -- reading -----------------------------------------------------------------------------

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        if not list(ids):
            return []
        found = self.table.get(ids=list(ids))
        return [
            _document(i, text, meta)
            for i, text, meta in zip(
                found["ids"], found["documents"], found["metadatas"], strict=True
            )
            if text is not None
        ]

    def similarity_search(
        self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter=filter)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest rows and their distance (lower is nearer)."""
        check_count(k, "k")
        found = self.table.query([query], k, embedder=self._embeddings.embedder, where=filter)
        return _scored(found)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict | None = None, **kwargs: Any
    ) -> list[Document]:
        return [d for d, _ in self._by_vector(embedding, k, filter)]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        vector = self._embeddings.embed_query(query)
        return self.max_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, filter=filter
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        check_count(k, "k")
        check_count(fetch_k, "fetch_k")
        query = self._checked(embedding)
        found = self.table.query_vectors(
            query, fetch_k, where=filter, include=["documents", "metadatas", "embeddings"]
        )
        stored = np.asarray(found["embeddings"][0])
        if not len(stored):
            return []
        picked = maximal_marginal_relevance(query, list(stored), lambda_mult=lambda_mult, k=k)
        rows = list(zip(found["ids"][0], found["documents"][0], found["metadatas"][0], strict=True))
        return [_document(*rows[i]) for i in picked]

    def _checked(self, embedding: Any) -> np.ndarray:
        contract = self.table.contract
        self.table.current()
        vector = check_query_vector(embedding, contract.output_dim, contract=contract)
        return storable(np.asarray(vector, dtype=np.float32), contract.precision)

    def _by_vector(
        self, embedding: Any, k: int, filter: dict | None
    ) -> list[tuple[Document, float]]:
        check_count(k, "k")
        return _scored(self.table.query_vectors(self._checked(embedding), k, where=filter))

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        # The table's distance is 1 - the contract's similarity (cosine or inner product).
        return lambda distance: 1.0 - distance

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        table_name: str = "langchain",
        connection: Any = None,
        **kwargs: Any,
    ) -> ContractPGVector:
        if connection is None:
            raise InvalidInputError("ContractPGVector.from_texts needs connection= (a DSN)")
        store = cls(table_name, contract_embeddings(embedding), connection=connection, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


def _document(i: str, text: str, meta: Any) -> Document:
    clean = {k: v for k, v in (meta or {}).items() if k != TEXT_KEY}
    return Document(page_content=text, metadata=clean, id=i)


def _scored(found: dict[str, Any]) -> list[tuple[Document, float]]:
    return [
        (_document(i, text, meta), float(distance))
        for i, text, meta, distance in zip(
            found["ids"][0],
            found["documents"][0],
            found["metadatas"][0],
            found["distances"][0],
            strict=True,
        )
    ]
