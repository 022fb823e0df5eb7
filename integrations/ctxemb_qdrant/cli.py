"""Qdrant's options on the ``ctxemb`` command line: ``--qdrant-path DIR`` or ``--qdrant-url URL``
(the key from ``$CTXEMB_QDRANT_API_KEY``, never shown): core's
:class:`~ctxemb_core.cli.stores.FolderOrUrl`, the module the CLI's store table names for
``--store qdrant`` (the protocol :class:`ctxemb_core.cli.stores.StoreOptions`).
"""

from __future__ import annotations

import argparse
from typing import Any

from ctxemb_core.cli.stores import FolderOrUrl
from ctxemb_qdrant import _store
from ctxemb_qdrant._store import connect as _connect

#: Where a store command looks without --qdrant-path or --qdrant-url (``connect``'s default).
DEFAULT_PATH = _store.DEFAULT_PATH
#: The environment variable a server's API key is read from.
API_KEY_ENV = "CTXEMB_QDRANT_API_KEY"


def _options() -> FolderOrUrl:
    """With this module's defaults as they are at the call (every command fills them in)."""
    return FolderOrUrl("qdrant", "Qdrant", DEFAULT_PATH, API_KEY_ENV)


def add_arguments(parser: argparse.ArgumentParser, *, demo: bool = False) -> None:
    _options().add_arguments(parser, demo=demo)


def check_arguments(args: argparse.Namespace, *, demo: bool = False) -> None:
    _options().check_arguments(args, demo=demo)


def defaults() -> dict[str, str]:
    return _options().defaults()


def absent(args: argparse.Namespace) -> bool:
    return _options().absent(args)


def flags(args: argparse.Namespace) -> str:
    return _options().flags(args)


def location(args: argparse.Namespace) -> str:
    return _options().location(args)


def connect(args: argparse.Namespace, *, create: bool) -> Any:
    """A client of the store the checked options name (see :func:`ctxemb_qdrant.connect`)."""
    where = _options().where(args)
    return _connect(**where) if "url" in where else _connect(**where, create=create)


def adapter() -> Any:
    """The Qdrant adapter: ``open_collection``, ``verify``, ``migrate``, ``restamp``, ..."""
    import ctxemb_qdrant

    return ctxemb_qdrant
