"""A store adapter's Ray session and its ``index_with_ray``, made from the adapter's name.

Every store adapter offers ``connect``, ``driver`` and ``check_name``
(:data:`ctxemb_core.store_tools.ADAPTER_API`), so what an actor does to reach an index is the
same for every store: import the adapter, connect, make the driver. :class:`AdapterSession`
does that, holding only the adapter's module name, the index's name and the keywords of the two
calls (so it pickles); :func:`index_with_ray_for` makes a store's public ``index_with_ray`` with
the store's own keywords. The adapter is imported by name when a session is made or opened:
this package imports no store adapter (it builds on ``ctxemb_core`` alone).
"""

from __future__ import annotations

import importlib
import inspect
import os
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxemb_core.contract import EmbeddingContract
from ctxemb_core.embedder import Embedder
from ctxemb_core.index import StoreDriver
from ctxemb_core.redact import redact_dsn
from ctxemb_ray._job import DriverSession, IndexSummary, index_with_ray

__all__ = ["AdapterSession", "index_with_ray_for"]


@dataclass(frozen=True, repr=False)
class AdapterSession(DriverSession):
    """Index ``name`` of the store adapter ``adapter`` (its module's name), as every actor
    reaches it: ``adapter.connect(**connect)``, then ``adapter.driver(client, name,
    embedder=embedder, **driver)``, on the actor's own node.

    The name, and each text keyword of the driver (the scope the index lives in: PostgreSQL's
    schema), are checked with the adapter's ``check_name`` when the session is made, so a bad
    one fails before anything is reached; the other keywords are the adapter's own calls' to
    check. The
    keywords travel to the actors as they are (a DSN with its password); the ``repr`` masks
    any password.

    Example:
        >>> AdapterSession("ctxemb_pgvector", "docs", {"dsn": "postgresql://app:s3cret@db/rag"})
        AdapterSession('ctxemb_pgvector', 'docs', connect={'dsn': 'postgresql://app:***@db/rag'})
    """

    adapter: str
    name: str
    connect: Mapping[str, Any] = field(default_factory=dict)
    driver: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        adapter = self._adapter()
        adapter.check_name(self.name)
        for key, value in self.driver.items():  # a name the index lives in (a schema): a name too
            if isinstance(value, str):
                adapter.check_name(value, f"{key} name")

    def __repr__(self) -> str:
        shown = [repr(self.adapter), repr(self.name)]
        for label, keywords in (("connect", self.connect), ("driver", self.driver)):
            if keywords:
                masked = {
                    k: redact_dsn(v) if isinstance(v, str) else v for k, v in keywords.items()
                }
                shown.append(f"{label}={masked!r}")
        return f"AdapterSession({', '.join(shown)})"

    def _adapter(self) -> Any:
        return importlib.import_module(self.adapter)

    def open(self, embedder: Embedder) -> tuple[Any, StoreDriver]:
        adapter = self._adapter()
        client = adapter.connect(**self.connect)
        try:
            return client, adapter.driver(client, self.name, embedder=embedder, **self.driver)
        except BaseException:
            client.close()
            raise


def _shape(
    source: str | os.PathLike[str], contract: EmbeddingContract, **options: Any
) -> IndexSummary:
    """What every store's ``index_with_ray`` takes besides its own keywords (its signature's
    first and last parameters)."""
    raise NotImplementedError


def index_with_ray_for(
    adapter: str,
    name: str,
    where: str,
    connect: Mapping[str, type],
    driver: Mapping[str, Any] | None = None,
) -> Callable[..., IndexSummary]:
    """The store adapter ``adapter``'s ``index_with_ray(source, contract, *, <name>,
    <connect...>, <driver...>, **options)``: :func:`ctxemb_ray.index_with_ray` over an
    :class:`AdapterSession`, with the store's own keywords in its signature (what ``inspect``
    and ``help`` show, and what a call is bound to).

    Args:
        adapter: the adapter's module name (``"ctxemb_pgvector"``).
        name: the keyword that names the index (``"table"``).
        where: the index, as the docstring says it (``"table in a PostgreSQL database"``).
        connect: the keywords of ``adapter.connect``, with their types (each required).
        driver: the keywords of ``adapter.driver``, with their defaults.

    Example:
        >>> job = index_with_ray_for("ctxemb_pgvector", "table", "table in a PostgreSQL database",
        ...                          connect={"dsn": str}, driver={"schema": "public"})
        >>> inspect.signature(job).parameters["schema"]
        <Parameter "schema: 'str' = 'public'">
    """
    driver = dict(driver or {})
    keyword = inspect.Parameter.KEYWORD_ONLY
    own = [inspect.Parameter(k, keyword, annotation=t.__name__) for k, t in connect.items()]
    own += [
        inspect.Parameter(k, keyword, default=v, annotation=type(v).__name__)
        for k, v in driver.items()
    ]
    shape = inspect.signature(_shape)
    source, contract, options = shape.parameters.values()
    named = inspect.Parameter(name, keyword, annotation="str")
    signature = shape.replace(parameters=[source, contract, named, *own, options])

    def job(*args: Any, **kwargs: Any) -> IndexSummary:
        try:
            given = signature.bind(*args, **kwargs)
        except TypeError as exc:  # as Python words a call's: the function's name first
            raise TypeError(f"index_with_ray(): {exc}") from None
        given.apply_defaults()
        got = given.arguments
        session = AdapterSession(
            adapter, got[name], {k: got[k] for k in connect}, {k: got[k] for k in driver}
        )
        return index_with_ray(got["source"], got["contract"], store=session, **got["options"])

    opened = ", ".join(f"{k}={k}" for k in connect)
    made = ", ".join(["client", name, *(f"{k}={k}" for k in driver)])
    job.__doc__ = f"Index a corpus into a stamped {where} with a pool of Ray actors.\n\n"
    job.__doc__ += textwrap.fill(
        f"Every actor reopens the store on its own node, as ``{adapter}.connect({opened})`` and "
        f"``{adapter}.driver({made})`` (so it must be reachable from every node); ``{name}`` is "
        "checked before anything is read. ``options``, what it returns and what it raises are "
        "those of :func:`ctxemb_ray.index_with_ray`.",
        96,
    )
    job.__name__ = job.__qualname__ = "index_with_ray"
    job.__module__ = adapter
    job.__signature__ = signature  # type: ignore[attr-defined]
    return job
