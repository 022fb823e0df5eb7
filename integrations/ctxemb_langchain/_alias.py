"""A LangChain vector store reached through a ctxemb alias, whatever the store beneath.

:class:`ContractAliasVectorStore` is a ``VectorStore`` on core's
:class:`~ctxemb_core.aliases.AliasedIndex` (through :class:`~ctxemb_core.aliases.AliasSource`):
the alias is read on every call, and when it moved the store serves the new index with the
encoder of its contract, both switched at once; without that encoder a call raises
:class:`~ctxemb_core.errors.NoEncoderError` naming the contract and returns nothing. Writes go
to every index the alias writes, each embedded under its own contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from ctxemb_core.aliases import (
    AliasReader,
    AliasSource,
    AliasStoreOptions,
    Encoders,
    read_alias,
)
from ctxemb_core.contract import same_contract
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import Match
from ctxemb_langchain._embeddings import ContractEmbeddings
from ctxemb_langchain._results import GuardedReads
from ctxemb_langchain._retriever import GuardedStore
from ctxemb_langchain._writer import BuiltFromTexts, TextWriter

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ContractAliasVectorStore(AliasReader, GuardedReads, BuiltFromTexts, TextWriter, GuardedStore):
    """A LangChain vector store on the index a ctxemb alias serves (see the module).

    ``add_texts``/``add_documents`` (upserts) and ``delete`` reach every index the alias
    writes: during an upgrade the current and the new index, each under its own contract, so
    nothing written is missing after the cutover or a rollback. Searches embed the query with
    the encoder of the index the alias serves at that call, and search that index.
    ``similarity_search_with_score`` gives the contract's distance (``1 - similarity``; lower
    is nearer), as ``ContractPGVector`` does. A raw vector is refused: it carries no contract,
    and the alias's contract changes at a cutover.

    Args:
        alias: the alias.
        encoders: what the store may embed with, found by each index's contract:
            :class:`ContractEmbeddings`, core ``Embedder``\\ s, model or export folders, URLs of
            servers that serve a contract.
        store: ``"chroma"`` or ``"pgvector"`` (left out: the one whose options are given).
        path, host, port: a Chroma folder (it must exist) or server (``port`` left out:
            the adapter's default).
        dsn, schema: a PostgreSQL connection string and schema.
        catalog: instead, a store you hold (``ctxemb_chroma.catalog(client)``).
        find: also find encoders among this machine's models, by weights digest.
        sample: stored records re-embedded when an index is first opened.

    Example:
        >>> store = ContractAliasVectorStore("docs", [embeddings], path="./chroma")
        >>> store.as_retriever(k=3).invoke("how is green tea made")  # doctest: +SKIP
    """

    def __init__(
        self,
        alias: str,
        encoders: Encoders | Sequence[Any] = (),
        *,
        dsn: str | None = None,
        **where: Unpack[AliasStoreOptions],
    ) -> None:
        given = () if isinstance(encoders, (Encoders, str)) else encoders
        self._given = [e for e in given if isinstance(e, ContractEmbeddings)]
        self.source = AliasSource(alias, encoders, dsn=dsn, **where)

    def _alias_source(self) -> AliasSource:
        return self.source

    @property
    def embeddings(self) -> Embeddings | None:
        """The :class:`ContractEmbeddings` given for the contract the alias serves now, if one
        was given (the query encoder follows the alias: a search never needs this). Only the
        alias is read: no index is opened, and no encoder is asked for."""
        contract = read_alias(self.source.catalog(), self.source.alias).target.contract
        return next((e for e in self._given if same_contract(contract, e.contract)), None)

    def close(self) -> None:
        """Close the client this store opened (a ``catalog=`` given is the caller's)."""
        self.source.close()

    # -- writing -----------------------------------------------------------------------------

    def _write(
        self, ids: list[str], texts: list[str], metas: list[Any] | None, **kwargs: Any
    ) -> None:
        self.aliased.upsert(ids, texts, metas)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete these ids from every index the alias writes (ids not stored are no error)."""
        if ids is None:
            raise InvalidInputError("delete needs ids; ContractAliasVectorStore never deletes all")
        if list(ids):
            self.aliased.delete(list(ids))
        return True

    @classmethod
    def _for_texts(cls, embedding: ContractEmbeddings, **kwargs: Any) -> ContractAliasVectorStore:
        # For from_texts: the alias (alias=, required) with this embedding among its encoders.
        alias = kwargs.pop("alias", None)
        if alias is None:
            raise InvalidInputError("ContractAliasVectorStore.from_texts needs alias=")
        return cls(alias, [embedding, *kwargs.pop("encoders", ())], **kwargs)

    # -- reading -----------------------------------------------------------------------------

    def _nearest(self, query: str, k: int, where: dict | None) -> Sequence[Match]:
        # The index the alias serves now, searched with its contract's encoder.
        return self.aliased.search([query], k, where=where).matches[0]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        raise InvalidInputError(
            "ContractAliasVectorStore searches by text: a vector carries no contract, and the "
            "alias's contract changes at a cutover (the query is embedded by the encoder of the "
            "index that answers it)"
        )

    def _candidates(self, query: str, k: int, where: dict | None) -> tuple[Any, Any, list[Match]]:
        index = self.index  # one index and its encoder for the whole search
        vector = index.query_vectors([query])[0]
        return (
            index,
            vector,
            index.query_vector(vector, k, fingerprint=index.stamp.fingerprint, where=where),
        )
