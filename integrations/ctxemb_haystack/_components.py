"""The guarded write and read of a Haystack pipeline: a writer and a retriever wrapper."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_to_dict
from haystack.document_stores.types import DuplicatePolicy

from ctxemb_core.documents import batch_fingerprint
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.guard import OPEN_SAMPLE
from ctxemb_core.hybrid import Fusion, LexicalContract
from ctxemb_core.validate import check_flag, check_sample_size
from ctxemb_haystack._base import Serialised, documents_of, in_thread
from ctxemb_haystack._hybrid_side import LexicalSide, recipe
from ctxemb_haystack._stores import guard_for
from ctxemb_haystack._writes import policy_of


def _adopt(adopt: bool) -> dict[str, bool]:
    # Written only when set, so the serialised form of every other component stays as it was.
    return {"adopt": True} if adopt else {}


@component
class ContractDocumentWriter(Serialised):
    """Writes documents embedded by :class:`ContractDocumentEmbedder` into a store, guarded.

    A drop-in for Haystack's ``DocumentWriter``. Before anything is written the whole batch is
    checked: every document must carry one contract's fingerprint and a vector of its width,
    and the store must hold that contract (Chroma: the collection's stamp, created with the
    collection on the first write; pgvector: the table's stamp row, created by
    ``ctxemb_pgvector`` with the table on the first write; in memory: the fingerprints of
    stored documents). A write that fails is undone (Chroma), is one transaction (pgvector) or
    never starts (in memory), so nothing is half-written.

    Args:
        document_store: an ``InMemoryDocumentStore``, a ``ChromaDocumentStore`` or a
            ``PgvectorDocumentStore``.
        policy: what to do with ids already stored (``NONE`` is ``FAIL``, as in Haystack).
        sample: stored Chroma records (pgvector rows) re-embedded when the collection (table)
            is opened.
        adopt: stamp an existing unstamped Chroma collection or pgvector table (written by
            Haystack's own ``DocumentWriter``, say) once a sample of its records re-embeds to
            their stored vectors under the documents' contract; a mismatch is refused, nothing
            written.
        hybrid: keep the store's lexical side (BM25, :class:`ContractLexicalRetriever`) in step:
            after each dense write, built from the store's texts if there is none, else the
            written ids brought in step with the texts the store keeps. An existing stamp's
            recipe, fusion and dense contract are checked before anything is written.
        lexical_path: the lexical folder (implies ``hybrid``); ``None`` for an embedded Chroma
            store: ``<persist_path>/ctxemb-lexical/<collection_name>``, as ``ctxemb_chroma``.
        lexical, fusion: the recipe a new lexical side is built under (``None``: BM25 k1 1.5,
            b 0.75, English stemmer and stop words; RRF k = 60), and that an existing one must
            have (:class:`~ctxemb_core.errors.HybridMismatchError` names the field).

    Raises (from ``run``):
        ContractMismatchError: the documents or the store are of another contract (the fields
            named when both contracts are known in this process).
        MissingStampError: a document was not embedded by a ctxemb embedder.
        DuplicateDocumentsError: ids already stored under policy ``FAIL``/``NONE`` (also a
            Haystack ``DuplicateDocumentError``).
        InvalidInputError: a document without content or with a vector of another width.
    """

    def __init__(
        self,
        document_store: Any,
        policy: DuplicatePolicy = DuplicatePolicy.NONE,
        *,
        sample: int = OPEN_SAMPLE,
        adopt: bool = False,
        hybrid: bool = False,
        lexical_path: str | None = None,
        lexical: LexicalContract | dict[str, Any] | None = None,
        fusion: Fusion | dict[str, Any] | None = None,
    ) -> None:
        self.document_store = document_store
        self.policy = policy_of(policy)
        self.sample = check_sample_size(sample)
        self.adopt = check_flag(adopt, "adopt")
        self.hybrid = check_flag(hybrid, "hybrid") or lexical_path is not None
        if not self.hybrid and (lexical is not None or fusion is not None):
            raise InvalidInputError("lexical and fusion belong to hybrid=True")
        self._guard = guard_for(document_store, self.sample, self.adopt)
        self._lexical = None
        if self.hybrid:
            self._lexical = LexicalSide(
                self._guard,
                lexical_path,
                recipe(lexical, LexicalContract, "lexical"),
                recipe(fusion, Fusion, "fusion"),
            )

    def to_dict(self) -> dict[str, Any]:
        side = self._lexical
        return default_to_dict(
            self,
            document_store=self.document_store,
            policy=self.policy.name,
            sample=self.sample,
            **_adopt(self.adopt),
            **({} if side is None else side.params()),  # written only when set, as adopt
        )

    @component.output_types(documents_written=int)
    def run(
        self, documents: list[Document], policy: DuplicatePolicy | None = None
    ) -> dict[str, int]:
        """Write the documents; returns ``documents_written``."""
        documents = documents_of(documents, "ContractDocumentWriter")
        side, fingerprint = self._lexical, None
        if side is not None and documents:
            fingerprint = batch_fingerprint([d.meta for d in documents], [d.id for d in documents])
            if fingerprint is not None:
                side.check_write(fingerprint)  # before anything is written
        written = self._guard.write(documents, policy_of(policy) if policy else self.policy)
        if side is not None and fingerprint is not None:
            side.write(fingerprint, [d.id for d in documents])
        return {"documents_written": written}

    run_async = in_thread(run)


@component
class ContractRetriever(Serialised):
    """Wraps an embedding retriever so a query of another contract never reaches the store.

    Connect :class:`ContractTextEmbedder`'s ``embedding`` and ``fingerprint`` outputs to this
    component's inputs. The store must have been written under the fingerprint's contract:
    a ``ChromaDocumentStore`` or ``QdrantDocumentStore`` collection or a
    ``PgvectorDocumentStore`` table by its stamp
    (checked, with its canary and a sample of records, when first read, and re-read on every
    call; the collection or table is searched through ctxemb's guarded index in the contract's
    distance, whatever a pgvector store's ``vector_function``), an ``InMemoryDocumentStore`` by the
    fingerprints of the documents found (one foreign document refuses the whole result).

    Scores are similarities, higher is better: for a normalised contract the cosine similarity
    (Chroma's and pgvector's distances converted; the in-memory store's dot product, never
    rescaled), for others the inner product (the in-memory store's ``dot_product``, Chroma's
    ``ip``, pgvector's ``<#>``).

    Args:
        retriever: an ``InMemoryEmbeddingRetriever``, a ``ChromaEmbeddingRetriever``, a
            ``PgvectorEmbeddingRetriever`` or a ``QdrantEmbeddingRetriever``; its ``top_k``,
            ``filters`` and ``filter_policy`` apply as usual (Chroma, pgvector and Qdrant: a
            filter of ``meta.<key> ==`` tests is the store's own search filter; any other
            selects its ids with the store's ``filter_documents`` first (Qdrant: tested on each
            record here), and those are ranked exactly).
        sample: stored Chroma records re-embedded when the collection is first read.
        adopt: stamp an unstamped Chroma collection on the first read once a sample of its
            records re-embeds to their stored vectors under the query's contract (the one
            write a retriever may make; a mismatch is refused).
    """

    def __init__(self, retriever: Any, *, sample: int = OPEN_SAMPLE, adopt: bool = False) -> None:
        store = getattr(retriever, "document_store", getattr(retriever, "_document_store", None))
        if store is None or not callable(getattr(retriever, "run", None)):
            raise TypeError(
                "ContractRetriever wraps an embedding retriever (InMemoryEmbeddingRetriever, "
                "ChromaEmbeddingRetriever, PgvectorEmbeddingRetriever or "
                f"QdrantEmbeddingRetriever), got {type(retriever).__name__}"
            )
        self.retriever = retriever
        self.sample = check_sample_size(sample)
        self.adopt = check_flag(adopt, "adopt")
        self._guard = guard_for(store, self.sample, self.adopt)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, retriever=self.retriever, sample=self.sample, **_adopt(self.adopt)
        )

    @component.output_types(documents=list[Document])
    def run(
        self,
        query_embedding: list[float],
        fingerprint: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve the documents nearest ``query_embedding``, after the contract is checked.

        Raises:
            ContractMismatchError: the store was written under another contract.
            MissingStampError: the store (or a document found) carries no ctxemb stamp.
        """
        if not isinstance(fingerprint, str):
            raise TypeError(f"fingerprint must be a string, got {type(fingerprint).__name__}")
        documents = self._guard.retrieve(
            self.retriever, query_embedding, fingerprint, filters=filters, top_k=top_k
        )
        return {"documents": documents}

    run_async = in_thread(run)
