"""A ``PgvectorDocumentStore`` through the ``ctxemb_pgvector`` guard: same table, same stamp.

Writes go through :meth:`GuardedTable.add_embedded` and searches through
:meth:`GuardedTable.query_vectors`, on a connection of the guard's own (made on first use from
the store's ``connection_string``), so the table a ctxemb pipeline writes is created stamped
by ``ctxemb_pgvector`` and the store's own calls then find it existing. The search orders by
the contract's distance (the table's layout), whatever the store's ``vector_function``.
"""

from __future__ import annotations

import logging
from typing import Any

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from haystack.document_stores.types.filter_policy import apply_filter_policy
from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

from ctxemb_core import Embedder, EmbeddingContract, IndexStamp
from ctxemb_core.documents import batch_fingerprint, check_fingerprint, recall
from ctxemb_core.errors import ExistingIdsError, InvalidInputError, MissingStampError
from ctxemb_core.guard import check_embedded, check_query_vector, similarity
from ctxemb_core.validate import check_records
from ctxemb_haystack._pgvector_rows import check_storable, where_of
from ctxemb_haystack._writes import DuplicateDocumentsError, content_of, contract_of, unique
from ctxemb_pgvector import GuardedTable, check_name, connect, open_table, stored_or_none

logger = logging.getLogger(__name__)


class PgvectorGuard:
    """The table behind a ``PgvectorDocumentStore``, opened through ``ctxemb_pgvector``."""

    def __init__(self, store: PgvectorDocumentStore, sample: int, adopt: bool = False) -> None:
        self.store = store
        self.sample = sample
        self.adopt = adopt
        self.name = check_name(store.table_name)
        self.schema = check_name(store.schema_name, "schema name")
        self._conn: Any = None
        self._opened: dict[str, GuardedTable] = {}  # by contract fingerprint

    def conn(self) -> Any:
        """The guard's connection to the store's database (made on first use, so building a
        pipeline or loading it from YAML reaches no server)."""
        if self._conn is None or self._conn.closed:
            dsn = self.store.connection_string.resolve_value()
            self._conn = connect(dsn or "", create_extension=self.store.create_extension)
            self._opened.clear()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def check_width(self, contract: EmbeddingContract) -> None:
        if self.store.embedding_dimension != contract.output_dim:
            raise InvalidInputError(
                f"PgvectorDocumentStore(embedding_dimension={self.store.embedding_dimension}) "
                f"but the contract's vectors are {contract.output_dim} wide "
                f"({contract.describe()}): build the store with "
                f"embedding_dimension={contract.output_dim}"
            )

    def opened(self, contract: EmbeddingContract, create: bool) -> GuardedTable:
        """The table opened under ``contract`` (verified once; later calls re-read the stamp
        and verify it again if it changed)."""
        conn = self.conn()
        guarded = self._opened.get(contract.fingerprint)
        if guarded is None:
            options: dict[str, Any] = {}
            if self.store.hnsw_ef_search is not None:
                options["ef_search"] = self.store.hnsw_ef_search
            guarded = open_table(
                conn,
                self.name,
                Embedder(contract),
                create=create,
                adopt=self.adopt,
                sample=self.sample,
                schema=self.schema,
                **options,
            )
            self._opened[contract.fingerprint] = guarded
        guarded.current()
        return guarded

    def stamp(self) -> IndexStamp | None:
        stored = stored_or_none(self.conn(), self.name, self.schema)
        if stored is None or not stored.stamped:
            return None
        return IndexStamp.from_metadata(stored.metadata)

    def write(self, documents: list[Document], policy: DuplicatePolicy) -> int:
        documents = unique(documents, policy)
        ids = [d.id for d in documents]
        fingerprint = batch_fingerprint([d.meta for d in documents], ids)
        if fingerprint is None:
            return 0
        stamp = self.stamp()
        stamped = stamp.contract if stamp is not None else None
        if stamped is not None:
            check_fingerprint(fingerprint, stamped)
        contract = contract_of(fingerprint, stamped)
        self.check_width(contract)
        # The whole batch is checked before the table is created (and stamped).
        texts = [content_of(d) for d in documents]
        metas = [dict(d.meta) for d in documents]
        check_records(ids, texts, metas)
        check_storable(ids, texts, metas)
        check_embedded([d.embedding for d in documents], contract, ids)
        for d in documents:
            if d.blob is not None:
                logger.warning("document %s: its blob is not stored by ctxemb", d.id)
        try:
            guarded = self.opened(contract, create=True)
        except MissingStampError as exc:
            stored = stored_or_none(self.conn(), self.name, self.schema)
            if stored is None or stored.count():
                raise
            raise MissingStampError(
                f"{exc} The table is empty: the PgvectorDocumentStore created it before the "
                "first ContractDocumentWriter write (any store call does). Drop it with "
                "store.delete_table() or use another table_name, and let "
                "ContractDocumentWriter create it stamped."
            ) from None
        rows = list(zip(documents, texts, metas, strict=True))
        if policy is DuplicatePolicy.SKIP:
            present = set(guarded.get(ids=ids, include=[])["ids"])
            rows = [r for r in rows if r[0].id not in present]
        if not rows:
            return 0
        try:
            guarded.add_embedded(
                [d.id for d, _, _ in rows],
                [d.embedding for d, _, _ in rows],
                [t for _, t, _ in rows],
                [m for _, _, m in rows],
                fingerprint=fingerprint,
                upsert=policy is DuplicatePolicy.OVERWRITE,
            )
        except ExistingIdsError as exc:
            raise DuplicateDocumentsError(exc.ids) from None
        return len(rows)

    def caller(self, fingerprint: str) -> EmbeddingContract:
        """The query's contract: built in this process, or else it must be the stamp's."""
        contract = recall(fingerprint)
        if contract is not None:
            return contract
        stored = stored_or_none(self.conn(), self.name, self.schema)
        stamp = IndexStamp.from_metadata(stored.metadata if stored is not None else None)
        return check_fingerprint(fingerprint, stamp.contract)

    def retrieve(
        self,
        retriever: Any,
        query_embedding: list[float],
        fingerprint: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
    ) -> list[Document]:
        contract = self.caller(fingerprint)
        vector = check_query_vector(query_embedding, contract.output_dim, contract=contract)
        if (
            contract.fingerprint not in self._opened
            and stored_or_none(self.conn(), self.name, self.schema) is None
        ):
            return []  # nothing indexed yet: nothing to return, and nothing is created
        guarded = self.opened(contract, create=False)
        filters = apply_filter_policy(retriever.filter_policy, retriever.filters, filters)
        where, ids = where_of(filters), None
        if filters and where is None:
            # Beyond metadata equality: the ids Haystack's own filter finds, searched by ctxemb.
            ids = [d.id for d in self.store.filter_documents(filters)]
            if not ids:
                return []
        found = guarded.query_vectors(
            [vector],
            top_k or retriever.top_k,
            where=where,
            ids=ids,
            include=["documents", "metadatas", "distances", "embeddings"],
        )
        space = guarded.layout.space_for_similarity
        scores = similarity(found["distances"][0], space, contract)
        return [
            Document(id=i, content=t, meta=m or {}, embedding=list(map(float, e)), score=float(s))
            for i, t, m, e, s in zip(
                found["ids"][0],
                found["documents"][0],
                found["metadatas"][0],
                found["embeddings"][0],
                scores,
                strict=True,
            )
        ]
