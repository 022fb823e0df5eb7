"""An alias opened from a framework (Haystack, LangChain), whatever the store.

A framework component opened by alias reads and writes through one
:class:`~ctxemb_core.aliases.aliased.AliasedIndex`: the alias read on every call, index and
query encoder switched together, every write reaching each index the alias writes. What the
component keeps is :class:`AliasSource`: the alias, where its store is and the encoders, in the
options a saved pipeline can hold, the store reached only on first use (building a pipeline
reaches no server):

- ``store="chroma"`` with ``path`` (an embedded folder) or ``host``/``port`` (a server; the
  port left out is the adapter's default, as ``ctxemb --host`` fills it in);
- ``store="pgvector"`` with ``dsn`` (and ``schema``);
- or ``catalog=``, a :class:`~ctxemb_core.aliases.book.Catalog` the caller holds
  (``ctxemb_chroma.catalog(client)``, a :class:`~ctxemb_core.aliases.MemoryCatalog`), which no
  configuration can name.

``store`` is the adapter's name, as ``ctxemb --store`` takes it; left out, the options name it
(``dsn`` or ``schema``: pgvector; ``path`` or ``host``: Chroma). The adapter is imported only
when the store is first reached.

Example:
    >>> source = AliasSource("docs", [embedder], store="chroma", path="./chroma")  # doctest: +SKIP
    >>> source.aliased().search("green tea").index                               # doctest: +SKIP
    'docs-v1'
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ctxemb_core.aliases.aliased import AliasedIndex
from ctxemb_core.aliases.book import Catalog
from ctxemb_core.aliases.encoders import Encoders
from ctxemb_core.aliases.record import check_alias_name
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index.guarded import OPEN_SAMPLE
from ctxemb_core.validate import check_flag, check_sample_size

if TYPE_CHECKING:
    from ctxemb_core.index.guarded import GuardedIndex

__all__ = ["ALIAS_STORES", "AliasReader", "AliasSource"]

#: The stores an alias is opened in by options: name -> the options it takes.
ALIAS_STORES = {"chroma": ("path", "host", "port"), "pgvector": ("dsn", "schema")}


def _store_of(store: str | None, given: dict[str, Any]) -> str:
    """The store the options name (``store`` if given), every option given its own."""
    # A port names no store by itself (the adapter fills in its default with a host).
    named = {
        s
        for s, options in ALIAS_STORES.items()
        for o in options
        if o != "port" and given.get(o) is not None
    }
    if store is None:
        if len(named) > 1:
            raise InvalidInputError(
                "the options name two stores (path=/host= Chroma, dsn=/schema= pgvector): "
                "give one store's"
            )
        if not named:
            raise InvalidInputError(
                "say where the alias's store is: store='chroma' with path= (a folder) or host= "
                "(a server), store='pgvector' with dsn=, or catalog= (a store you hold)"
            )
        store = next(iter(named))
    if store not in ALIAS_STORES:
        raise InvalidInputError(f"store must be one of {sorted(ALIAS_STORES)}, got {store!r}")
    for option in sorted(set(ALIAS_STORES) - {store}):
        for name in ALIAS_STORES[option]:
            if name != "port" and given.get(name) is not None:
                raise InvalidInputError(f"{name}= is a {option} option, not a {store} one")
    if store == "chroma" and (given.get("path") is None) == (given.get("host") is None):
        raise InvalidInputError("a Chroma store is a folder (path=) or a server (host=): one")
    dsn = given.get("dsn")
    if store == "pgvector" and not (callable(dsn) or (isinstance(dsn, str) and dsn.strip())):
        raise InvalidInputError("a pgvector store needs dsn= (a PostgreSQL connection string)")
    return store


def _default_port(store: str) -> int:
    """The port a store adapter fills in for a server given by its host alone: its
    :class:`~ctxemb_core.cli.stores.StoreOptions`' default (the module ``ctxemb_<store>.cli``,
    loaded by name, as the CLI's store table names it), as every ``ctxemb`` command's."""
    options = importlib.import_module(f"ctxemb_{store}.cli")
    defaults = getattr(options, "defaults", None)
    port = None if defaults is None else defaults().get("port")
    if port is None:
        raise InvalidInputError(f"the {store} store has no default port: give port=")
    return int(port)


class AliasSource:
    """An alias, its store and its encoders, opened on first use (see the module).

    Args:
        alias: the alias's name.
        encoders: what the component may embed with, found by each index's contract: an
            :class:`~ctxemb_core.aliases.Encoders`, or a sequence of embedders (built, lazy, a
            framework's embedding component, an :meth:`Embedder.config`), model or export
            folders and server URLs.
        store, path, host, port, dsn, schema: where the store is (see the module); ``dsn``
            may be a function that returns it, called when the store is first reached (a
            framework's secret, read from the environment only then); ``port`` left out with
            a ``host``: the store adapter's default (its ``StoreOptions``' ``defaults()``).
        catalog: instead, a catalog held by the caller (closed by the caller).
        find: also find encoders among this machine's models, by weights digest.
        sample: stored records re-embedded when an index is first opened.

    Raises:
        InvalidInputError: a bad alias name, options that do not say one store, or both
            ``catalog`` and store options.
    """

    def __init__(
        self,
        alias: str,
        encoders: Encoders | Sequence[Any] = (),
        *,
        store: str | None = None,
        path: str | None = None,
        host: str | None = None,
        port: int | None = None,
        dsn: str | Callable[[], str | None] | None = None,
        schema: str | None = None,
        catalog: Catalog | None = None,
        find: bool = False,
        sample: int = OPEN_SAMPLE,
    ) -> None:
        self.alias = check_alias_name(alias)
        self.find = check_flag(find, "find")
        if isinstance(encoders, Encoders):
            self.encoders = encoders
        elif isinstance(encoders, (str, bytes)) or not isinstance(encoders, Sequence):
            raise InvalidInputError(
                "encoders is a list of embedders, model folders or server URLs (or Encoders), "
                f"got {type(encoders).__name__}"
            )
        else:
            self.encoders = Encoders(*encoders, find=self.find)
        self.sample = check_sample_size(sample)
        given = {"path": path, "host": host, "port": port, "dsn": dsn, "schema": schema}
        if catalog is not None:
            if store is not None or any(v is not None for k, v in given.items() if k != "port"):
                raise InvalidInputError("give catalog= or the store's options, not both")
            if not isinstance(catalog, Catalog):
                raise InvalidInputError(
                    f"catalog must be a store's Catalog (ctxemb_chroma.catalog(client), ...), "
                    f"got {type(catalog).__name__}"
                )
            self.store: str | None = None
        else:
            self.store = _store_of(store, given)
        self.where = {
            k: v for k, v in given.items() if self.store and k in ALIAS_STORES[self.store]
        }
        if self.store == "chroma" and path is not None:
            self.where.pop("port")
        self.where = {k: v for k, v in self.where.items() if v is not None}
        self._given_catalog = catalog
        self._catalog = catalog
        self._client: Any = None
        self._aliased: AliasedIndex | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = self.store or "a catalog given"
        return f"AliasSource({self.alias!r} in {where}, {self.encoders!r})"

    def params(self) -> dict[str, Any]:
        """What a component's configuration keeps (``dsn`` left out: it may hold a password,
        and each framework keeps secrets its own way).

        Raises:
            InvalidInputError: the store was given as ``catalog=``, which no configuration
                can name.
        """
        if self.store is None:
            raise InvalidInputError(
                f"alias {self.alias!r} was opened on a catalog= object, which a configuration "
                "cannot hold: give store= and where it is (path=, host=, dsn=) to save it"
            )
        params: dict[str, Any] = {"alias": self.alias, "store": self.store}
        params |= {k: v for k, v in self.where.items() if k != "dsn"}
        params["encoders"] = self.encoders.config()
        if self.find:
            params["find"] = True
        params["sample"] = self.sample
        return params

    def catalog(self) -> Catalog:
        """The store, reached on first use (an embedded folder must exist already)."""
        with self._lock:
            if self._catalog is None:
                assert self.store is not None
                adapter = importlib.import_module(f"ctxemb_{self.store}")
                where = dict(self.where)
                schema = where.pop("schema", None)
                if self.store == "chroma" and "path" in where:
                    where["create"] = False  # a mistyped folder is refused, not made empty
                if "host" in where and "port" not in where:
                    where["port"] = _default_port(self.store)
                if self.store == "pgvector":
                    dsn = where.pop("dsn")
                    dsn = dsn() if callable(dsn) else dsn
                    if not (isinstance(dsn, str) and dsn.strip()):
                        raise InvalidInputError(
                            f"alias {self.alias!r}: the PostgreSQL connection string is empty"
                        )
                    client = adapter.connect(dsn)
                else:
                    client = adapter.connect(**where)
                try:
                    catalog = adapter.catalog(client, **({"schema": schema} if schema else {}))
                except BaseException:
                    client.close()
                    raise
                self._client, self._catalog = client, catalog
            return self._catalog

    def aliased(self) -> AliasedIndex:
        """The alias opened (once): its target verified under its contract's encoder.

        Raises:
            UnknownAliasError: no such alias in the store.
            NoEncoderError: no encoder makes the contract the alias serves.
        """
        if self._aliased is None:
            catalog = self.catalog()
            with self._lock:
                if self._aliased is None:
                    self._aliased = AliasedIndex.open(
                        catalog, self.alias, self.encoders, sample=self.sample
                    )
        return self._aliased

    def close(self) -> None:
        """Close the client this source opened (a ``catalog=`` given is the caller's)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
            self._client, self._aliased = None, None
            self._catalog = self._given_catalog


class AliasReader:
    """What a framework's store opened by alias reads through its :class:`AliasSource`
    (:meth:`_alias_source`), the same in every framework: the alias opened, and the index it
    serves now with its contract's encoder."""

    def _alias_source(self) -> AliasSource:
        raise NotImplementedError

    @property
    def aliased(self) -> AliasedIndex:
        """The alias opened (on first use)."""
        return self._alias_source().aliased()

    @property
    def index(self) -> GuardedIndex:
        """The index the alias serves now (read on this call), with its contract's encoder."""
        return self.aliased.index
