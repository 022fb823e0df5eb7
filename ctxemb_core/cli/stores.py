"""The stores the ``ctxemb`` commands reach, and the options each store's adapter declares.

A store's options (where it is, how to reach it) are its adapter's knowledge, not the CLI's:
:data:`STORES` names, for each store, a module of its adapter that follows the protocol
:class:`StoreOptions`, and the commands call only that protocol. The adapter is imported when a
parser is built or a store is opened, never when this module is imported, so the core (and
``ctxemb --help``) works without any store's client library installed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Protocol

from ctxemb_core.cli.common import PORT, Parser
from ctxemb_core.errors import InvalidInputError, MissingDependencyError

__all__ = [
    "PORT",
    "STORES",
    "StoreOptions",
    "demo_store_args",
    "open_store",
    "options_only_for",
    "store_args",
    "store_options",
]

#: The one command whose parser gets the stores' options (``None``: every command's).
_ONLY: ContextVar[str | None] = ContextVar("ctxemb_cli_store_options_for", default=None)

#: The stores the CLI has adapters for: ``--store`` NAME -> the adapter's module of CLI options
#: (a :class:`StoreOptions`), inside the import package ``ctxemb_<store>``.
STORES = {"chroma": "ctxemb_chroma.cli", "pgvector": "ctxemb_pgvector.cli"}


class StoreOptions(Protocol):
    """What a store's adapter gives the CLI: its options, checked together, and a client.

    The options land on the command's ``argparse.Namespace`` under the adapter's own names
    (Chroma: ``path``, ``host``, ``port``); only the adapter reads them. This module is the one
    an adapter imports for it: :data:`PORT` is the ``type=`` of a port option, whose errors read
    like every other integer option's.
    """

    def add_arguments(self, parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
        """Add the options that say where the store is (``demo``: the demo's own store)."""

    def check_arguments(self, args: argparse.Namespace, *, demo: bool = False) -> None:
        """Check the options together and fill in their defaults; raise InvalidInputError."""

    def absent(self, args: argparse.Namespace) -> bool:
        """Whether the options (not yet checked) name a store that is not there yet."""

    def flags(self, args: argparse.Namespace) -> str:
        """The checked options as a shell would take them, for a command line to copy."""

    def location(self, args: argparse.Namespace) -> str:
        """Where the checked options point, in a few words."""

    def connect(self, args: argparse.Namespace, *, create: bool) -> Any:
        """A client of the store (closed with ``.close()``); ``create=False`` never makes one."""

    def adapter(self) -> Any:
        """The adapter module: ``open_collection``, ``verify``, ``migrate``, ``restamp``, ..."""


def store_options(store: str) -> StoreOptions:
    """The store's :class:`StoreOptions`, loaded by name only now."""
    try:
        module: StoreOptions = importlib.import_module(STORES[store])
    except ImportError as exc:
        raise MissingDependencyError(
            f"the {store!r} store needs its adapter: pip install 'ctxemb[{store}]' ({exc})"
        ) from None
    return module


def store_args(p: argparse.ArgumentParser, *, collection_required: bool = True) -> None:
    """``--collection``, ``--store``, each store's own options, and ``--no-cache``.

    A store whose adapter is not installed adds nothing; when no store can, the command says
    which ``pip install`` it needs as soon as it is chosen (see :class:`Parser`).
    """
    p.add_argument("--collection", required=collection_required, help="collection name")
    p.add_argument("--store", default="chroma", choices=STORES, help="the store's adapter")
    _adapters_args(p)
    p.add_argument(
        "--no-cache", action="store_true", help="do not read or write the embedding cache"
    )


def demo_store_args(p: argparse.ArgumentParser) -> None:
    """``--store`` and each store's options for the demo's own store (collection: the demo's).

    The demo runs on Chroma only: ``--store`` is not listed in its help, and another store
    given is refused by that store's adapter with the reason.
    """
    p.add_argument("--store", default="chroma", choices=STORES, help=argparse.SUPPRESS)
    _adapters_args(p, demo=True)


@contextlib.contextmanager
def options_only_for(prog: str | None) -> Iterator[None]:
    """Parsers built in the block get the stores' options only if their ``prog`` is ``prog``.

    :func:`~ctxemb_core.cli.app.main` runs one command: importing a store's adapter (and its
    client library) to build the options of the commands it does not run would only slow
    ``ctxemb --help`` and the commands that use no store. The parsers left without them are
    never parsed; should one be, it says so instead of misreading its arguments.
    """
    token = _ONLY.set(prog)
    try:
        yield
    finally:
        _ONLY.reset(token)


def _adapters_args(p: argparse.ArgumentParser, *, demo: bool = False) -> None:
    only = _ONLY.get()
    if only is not None and p.prog != only:
        if isinstance(p, Parser):
            p.unavailable = InvalidInputError(f"{p.prog}: built without its store's options")
        return
    missing: list[MissingDependencyError] = []
    for store in STORES:
        try:
            options = store_options(store)
        except MissingDependencyError as exc:
            missing.append(exc)
            continue
        options.add_arguments(p, demo=demo)
    if missing and len(missing) == len(STORES) and isinstance(p, Parser):
        p.unavailable = missing[0]


@contextlib.contextmanager
def open_store(
    args: argparse.Namespace, *, create: bool, demo: bool = False
) -> Iterator[tuple[Any, Any]]:
    """The store's adapter and a client for it, closed when the block ends.

    ``create=False`` (commands that only read) refuses a store that is not there instead of
    creating an empty one. A server's client holds sockets until it is closed.
    """
    options = store_options(args.store)
    options.check_arguments(args, demo=demo)
    adapter = options.adapter()
    for option in ("collection", "to"):
        if getattr(args, option, None) is not None:
            adapter.check_name(getattr(args, option))  # before connecting creates a store
    client = options.connect(args, create=create)
    try:
        yield adapter, client
    finally:
        client.close()
