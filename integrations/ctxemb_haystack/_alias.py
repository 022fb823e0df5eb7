"""Haystack over an alias, whatever the store: the document store (its retriever is
:mod:`._alias_retriever`).

:class:`ContractAliasDocumentStore` is a Haystack ``DocumentStore`` on core's
:class:`~ctxemb_core.aliases.AliasedIndex` (through :class:`~ctxemb_core.aliases.AliasSource`):
the alias is read on every call, and when it moved the store serves the new index with the
encoder of its contract, both switched at once; without that encoder a call raises
:class:`~ctxemb_core.errors.NoEncoderError` naming the contract and returns nothing. Because an
upgrade writes each index under its own contract, the store embeds the documents it is given
itself (a vector made elsewhere fits one contract only). :class:`ContractAliasRetriever` takes
the query text, for the same reason: the query is embedded by the encoder of the index that
answers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils import Secret, deserialize_secrets_inplace
from haystack.utils.filters import document_matches_filter

from ctxemb_core.aliases import AliasedIndex, AliasSource, AliasStoreOptions, Encoders
from ctxemb_core.documents import FINGERPRINT_KEY, TEXT_KEY
from ctxemb_core.errors import ExistingIdsError, InvalidInputError
from ctxemb_core.index import GuardedIndex
from ctxemb_haystack._base import documents_of
from ctxemb_haystack._search import stored_documents
from ctxemb_haystack._writes import DuplicateDocumentsError, content_of, policy_of, unique

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ContractAliasDocumentStore:
    """A Haystack document store reached through a ctxemb alias (see the module).

    Writes (``write_documents``, ``delete_documents``; Haystack's own ``DocumentWriter`` works)
    go to every index the alias writes: during an upgrade the current and the new index, each
    under its own contract. Reads (``count_documents``, ``filter_documents``,
    :class:`ContractAliasRetriever`) come from the index the alias serves at that call.
    ``to_dict`` keeps the alias, never the index it serves now.

    Args:
        alias: the alias.
        encoders: what the store may embed with, found by each index's contract: embedders
            (``ContractTextEmbedder``/``ContractDocumentEmbedder``, a core ``Embedder``),
            model or export folders, URLs of servers that serve a contract.
        store: the store's adapter, ``"chroma"`` or ``"pgvector"`` (left out: the one whose
            options are given).
        path, host, port: a Chroma folder (it must exist) or server (``port`` left out:
            the adapter's default).
        dsn, schema: a PostgreSQL connection string, as a Haystack ``Secret``
            (``Secret.from_env_var("PG_CONN_STR")``), and schema.
        catalog: instead of the options, a store you hold (``ctxemb_chroma.catalog(client)``);
            a store given so cannot be serialised.
        find: also find encoders among this machine's models, by weights digest.
        sample: stored records re-embedded when an index is first opened.

    Example:
        >>> store = ContractAliasDocumentStore("docs", encoders=[embedder], path="./chroma")
        >>> DocumentWriter(store).run([Document(content="Green tea is steamed.")])  # doctest: +SKIP
    """

    def __init__(
        self,
        alias: str,
        *,
        encoders: Encoders | Sequence[Any] = (),
        dsn: Secret | str | None = None,
        **where: Unpack[AliasStoreOptions],
    ) -> None:
        self.dsn = Secret.from_token(dsn) if isinstance(dsn, str) else dsn
        # The connection string is read from the Secret when the store is first reached.
        secret = None if self.dsn is None else self.dsn.resolve_value
        self.source = AliasSource(alias, encoders, dsn=secret, **where)

    def to_dict(self) -> dict[str, Any]:
        dsn = {} if self.dsn is None else {"dsn": self.dsn.to_dict()}
        return default_to_dict(self, **self.source.params(), **dsn)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContractAliasDocumentStore:
        init = dict(data.get("init_parameters", {}))
        deserialize_secrets_inplace(init, keys=["dsn"])
        return default_from_dict(cls, {**data, "init_parameters": init})

    @property
    def aliased(self) -> AliasedIndex:
        """The alias opened (on first use)."""
        return self.source.aliased()

    def serving(self) -> GuardedIndex:
        """The index the alias serves now (read on this call), with its contract's encoder."""
        return self.aliased.index

    def close(self) -> None:
        self.source.close()

    def count_documents(self) -> int:
        return self.aliased.count()

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """The documents of the index the alias serves that match Haystack's ``filters``
        (every record is read and tested here, as ``InMemoryDocumentStore`` does)."""
        documents = as_written(stored_documents(self.serving()))
        if not filters:
            return documents
        if "operator" not in filters:
            raise InvalidInputError(
                "filters must be a Haystack filter ({'field': ..., 'operator': ..., 'value': ...} "
                f"or {{'operator': 'AND', 'conditions': [...]}}), got {filters!r}"
            )
        return [d for d in documents if document_matches_filter(filters, d)]

    def write_documents(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE
    ) -> int:
        """Embed the documents' content under each index's contract and write them to every
        index the alias writes, all or nothing in each; returns how many were written.

        Raises:
            DuplicateDocumentsError: ids stored already under policy ``NONE``/``FAIL``.
            NoEncoderError: no encoder for the contract of an index the alias writes.
        """
        policy = policy_of(policy)
        documents = unique(documents_of(documents, "ContractAliasDocumentStore"), policy)
        aliased = self.aliased
        if policy is DuplicatePolicy.SKIP and documents:
            present = {r.id for r in aliased.index.get([d.id for d in documents], include=())}
            documents = [d for d in documents if d.id not in present]
        if not documents:
            return 0
        ids = [d.id for d in documents]
        texts = [content_of(d) for d in documents]
        # A ContractDocumentEmbedder's fingerprint names one contract: each index sets its own.
        metas = [
            {k: v for k, v in d.meta.items() if k != FINGERPRINT_KEY} or None for d in documents
        ]
        try:
            if policy is DuplicatePolicy.OVERWRITE or policy is DuplicatePolicy.SKIP:
                aliased.upsert(ids, texts, metas)
            else:
                aliased.add(ids, texts, metas)
        except ExistingIdsError as exc:
            raise DuplicateDocumentsError(exc.ids) from None
        return len(ids)

    def delete_documents(self, document_ids: list[str]) -> None:
        """Delete from every index the alias writes (ids not stored are no error)."""
        if list(document_ids):
            self.aliased.delete(list(document_ids))


def as_written(documents: list[Document]) -> list[Document]:
    """The documents without the text digest ctxemb keeps beside each record (each index of
    an upgrade keeps its own): they come out as they were written."""
    for d in documents:
        d.meta.pop(TEXT_KEY, None)
    return documents
