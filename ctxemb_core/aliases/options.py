"""The keywords a framework's alias store passes on to :class:`~ctxemb_core.aliases.AliasSource`.

Haystack's ``ContractAliasDocumentStore`` and LangChain's ``ContractAliasVectorStore`` take where
an alias's store is and how its indexes open as these keywords (``**where:
Unpack[AliasStoreOptions]``) and hand them on unchanged, so a store or option an alias gains is
added here and in :class:`~ctxemb_core.aliases.AliasSource` only, not once per framework. The
connection string (``dsn``) is left to each framework: Haystack holds it as a ``Secret``.
"""

from __future__ import annotations

from typing import TypedDict

from ctxemb_core.aliases.book import Catalog

__all__ = ["AliasStoreOptions"]


class AliasStoreOptions(TypedDict, total=False):
    """:class:`~ctxemb_core.aliases.AliasSource`'s keywords but ``dsn`` (see its Args):

    - ``store``: the store adapter's name, ``"chroma"`` or ``"pgvector"`` (left out: the one
      whose options are given);
    - ``path``, ``host``, ``port``: a Chroma folder or server (``port`` left out: the
      adapter's default); ``schema``: the PostgreSQL schema;
    - ``catalog``: instead of the options, a store the caller holds;
    - ``find``: also find encoders among this machine's models, by weights digest;
    - ``sample``: stored records re-embedded when an index is first opened.
    """

    store: str | None
    path: str | None
    host: str | None
    port: int | None
    schema: str | None
    catalog: Catalog | None
    find: bool
    sample: int
